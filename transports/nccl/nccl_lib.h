/*
 * nccl_lib.h: the NCCL functions the transport calls, looked up in libnccl at run time.
 *
 * The plugin does not link libnccl: a process has one libnccl.so.2 (the loader shares a library
 * by its soname), and whichever comes first serves every later user. Linked, the plugin would bring
 * the system's NCCL in as soon as the transports are listed, and a PyTorch imported after that
 * would be bound to it (and fail on any symbol the older NCCL lacks). So libnccl is loaded only
 * where a CUDA device exists, and the process's own copy (PyTorch's, a framework's) is preferred
 * to a new one.
 */
#ifndef FA_NCCL_LIB_H
#define FA_NCCL_LIB_H

#include <cuda_runtime_api.h>
#include <stddef.h>
/* nccl.h declares ncclGroupStart() and a few others without (void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

/* Each member has the type nccl.h gives the function of the same name. */
typedef struct nccl_lib {
  __typeof__(ncclGetVersion) *GetVersion;
  __typeof__(ncclGetErrorString) *GetErrorString;
  const char *(*GetLastError)(ncclComm_t comm); /* NULL before NCCL 2.13 */
  __typeof__(ncclCommGetAsyncError) *CommGetAsyncError;
  __typeof__(ncclCommUserRank) *CommUserRank;
  __typeof__(ncclCommCount) *CommCount;
  __typeof__(ncclCommCuDevice) *CommCuDevice;
  __typeof__(ncclAllReduce) *AllReduce;
  __typeof__(ncclGroupStart) *GroupStart;
  __typeof__(ncclGroupEnd) *GroupEnd;
  __typeof__(ncclSend) *Send;
  __typeof__(ncclRecv) *Recv;
  char path[512];     /* where the library was found, or its soname when the loader does not say */
  int already_loaded; /* the process had it before the plugin asked */
} nccl_lib;

/* libnccl.so.2's functions: the copy already in the process, else the one the dynamic loader
   finds (LD_LIBRARY_PATH, the plugin's run path: the NCCL it was built against, the system's).
   Loaded once; NULL with the reason in why when there is none or it lacks a function. */
const nccl_lib *nccl_lib_load(char *why, size_t why_len);

#endif
