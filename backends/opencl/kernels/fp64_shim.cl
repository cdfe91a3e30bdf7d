/*
 * fp64_shim.cl: pasted just before core/math/philox.h in fa_quantize's program. philox.h's
 * fa_dropout_threshold (dropout's, unused here) computes in double, a type OpenCL C has only with
 * cl_khr_fp64; on a device without it that function computes in float instead, so the program
 * builds there too. quantize.cl gives the name back.
 */
#ifndef cl_khr_fp64
#define double float
#endif
