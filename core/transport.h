/*
 * transport.h: the contract between the core library and a transport plugin, the communication a
 * ring call (core/ring.c) runs on.
 *
 * A transport is a shared object libfa_<name>.so (found as the backend plugins are, core/
 * registry.c) exporting FA_TRANSPORT_ENTRY_SYMBOL, which hands its table only to a core of the same
 * FA_TRANSPORT_ABI_VERSION; this version is separate from the backends' FA_PLUGIN_ABI_VERSION.
 * The ring needs three things from it: a reduction for the ranks' agreement on the arguments, and a
 * non-blocking exchange (send to one rank, receive from another) started before a block's compute
 * and waited for after it. The same table fits MPI on host memory and NCCL on a stream.
 *
 * Every function but probe reports failure through fa_core_set_error and returns its status.
 */
#ifndef FA_CORE_TRANSPORT_H
#define FA_CORE_TRANSPORT_H

#include "plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FA_TRANSPORT_ABI_VERSION 2u
#define FA_TRANSPORT_ENTRY_SYMBOL "fa_transport_entry"

/** What probe() reports: whether the communication library is usable, and which one it is. */
typedef struct fa_transport_probe {
  int32_t available;
  char reason[FA_REASON_LEN];
  char runtime[256];
} fa_transport_probe;

/* Messages of one ring call on one communicator: a transport may use them as tags. */
typedef enum fa_ring_channel { FA_RING_CHANNEL_KV = 1, FA_RING_CHANNEL_DKV = 2 } fa_ring_channel;

typedef struct fa_transport {
  uint32_t abi_version; /* FA_TRANSPORT_ABI_VERSION the plugin was built for */
  uint32_t struct_size; /* sizeof(fa_transport) it was built with */
  int32_t kind;         /* fa_transport_kind */
  const char *name;
  /* Probes the library once; never fails hard. */
  void (*probe)(fa_transport_probe *out);
  /* Opens the caller's communicator (fa_ring_args.comm) for one ring call: a private channel of
     the transport's own (messages never match the caller's) with this process's rank and the
     world size, and the device whose memory it carries (NCCL: the communicator's GPU; -1 for host
     memory). stream is params.stream (NCCL; NULL for host transports). Collective. */
  fa_status (*open)(void *handle, void *stream, void **comm, int32_t *rank, int32_t *world,
                    int32_t *device);
  /* Element-wise maximum of values[0..count) over the ranks, in place. Collective, blocking. */
  fa_status (*allreduce_max)(void *comm, int64_t *values, int32_t count);
  /* Starts sending bytes from send to rank `to` and receiving bytes into recv from rank `from`
     on channel; *pending is what exchange_wait completes. send and recv do not overlap and stay
     untouched until then. */
  fa_status (*exchange_start)(void *comm, int32_t channel, const void *send, int32_t to, void *recv,
                              int32_t from, size_t bytes, void **pending);
  /* Waits for an exchange to finish (both directions) and frees *pending. */
  fa_status (*exchange_wait)(void *comm, void *pending);
  /* Closes what open opened. Collective. The core calls it before it frees the call's buffers: a
     device transport orders the stream after every exchange it enqueued (waited for or not), so
     that memory freed in the stream's order is no longer a transfer's. */
  void (*close)(void *comm);
} fa_transport;

typedef const fa_transport *(*fa_transport_entry_fn)(uint32_t core_abi_version);

/* Defines a transport's table and its exported entry point, which hands the table only to a core
   of the same transport ABI. */
#define FA_TRANSPORT_DEFINE(kind, name, probe, open, allreduce_max, start, wait, close) \
  FA_API const fa_transport *fa_transport_entry(uint32_t core_abi_version) {            \
    static const fa_transport table = {FA_TRANSPORT_ABI_VERSION,                        \
                                       (uint32_t)sizeof(fa_transport),                  \
                                       (kind),                                          \
                                       (name),                                          \
                                       (probe),                                         \
                                       (open),                                          \
                                       (allreduce_max),                                 \
                                       (start),                                         \
                                       (wait),                                          \
                                       (close)};                                        \
    return core_abi_version == FA_TRANSPORT_ABI_VERSION ? &table : NULL;                \
  }

#ifdef __cplusplus
}
#endif

#endif /* FA_CORE_TRANSPORT_H */
