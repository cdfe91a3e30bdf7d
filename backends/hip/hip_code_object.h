/*
 * hip_code_object.h: the generic kernels' offload bundle (one code object per architecture of
 * FA_HIP_ARCHS, from hipcc --genco), embedded by the build (hip_embed.cmake writes its bytes
 * into a generated C file), for hipModuleLoadData.
 */
#ifndef FA_HIP_CODE_OBJECT_H
#define FA_HIP_CODE_OBJECT_H

#include <stddef.h>

extern const unsigned char hip_code_object[];
extern const size_t hip_code_object_size;

#endif /* FA_HIP_CODE_OBJECT_H */
