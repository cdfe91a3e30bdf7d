/*
 * mpi_transport.c: the ring's MPI transport (core/transport.h), libfa_mpi.so.
 *
 * fa_ring_args.comm is the address of the caller's MPI_Comm. MPI_Comm's type belongs to the MPI
 * implementation (an int in MPICH, a pointer in Open MPI), so this plugin must be built against the
 * MPI the application runs with (cmake/transports.cmake). Each ring call duplicates the caller's
 * communicator, so the ring's messages never match the caller's, and sets MPI_ERRORS_RETURN on the
 * duplicate, so an MPI failure becomes FA_ERR_BACKEND_FAILURE with MPI's message instead of an
 * abort. MPI is called from the calling thread only: a caller that makes ring calls from several
 * threads at once needs MPI_THREAD_MULTIPLE, as for any MPI use.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/transport.h"

/* Messages above INT_MAX bytes (MPI counts are int) go as several of at most this size. */
#define PIECE_BYTES ((size_t)1 << 30)

typedef struct mpi_ring_comm {
  MPI_Comm comm;
} mpi_ring_comm;

typedef struct mpi_pending {
  int count;
  MPI_Request req[];
} mpi_pending;

static fa_status mpi_failed(const char *what, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
  return fa_core_set_error(FA_ERR_BACKEND_FAILURE, "mpi transport: %s failed: %s", what, msg);
}

/* The MPI family whose MPI_Comm this plugin was compiled for. Open MPI's handles are pointers;
   MPICH and the MPIs built on it (Intel MPI, MVAPICH, Cray MPICH) share MPICH's integer handles. */
#if defined(OMPI_MAJOR_VERSION)
#define BUILT_FOR "Open MPI"
#define SAME_FAMILY(version) (strstr((version), "Open MPI") != NULL)
#elif defined(MPICH_VERSION)
#define BUILT_FOR "MPICH"
#define SAME_FAMILY(version) (strstr((version), "Open MPI") == NULL)
#else
#define BUILT_FOR "this MPI"
#define SAME_FAMILY(version) 1
#endif

static void mpi_probe(fa_transport_probe *out) {
  /* MPI_Get_library_version may be called before MPI_Init (MPI-3). In a process that already
     holds another MPI library, the symbol resolves to that one, so its answer names the MPI the
     application runs with. */
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  version[0] = '\0';
  MPI_Get_library_version(version, &len);
  version[strcspn(version, ",\n")] = '\0';
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  snprintf(out->runtime, sizeof out->runtime, "%s (MPI %d.%d)", version, major, minor);
  out->available = SAME_FAMILY(version);
  if (!out->available)
    snprintf(out->reason, sizeof out->reason,
             "libfa_mpi.so was built against " BUILT_FOR
             " but this process runs %s, whose MPI_Comm differs: rebuild flashattn with that MPI",
             version);
}

static fa_status mpi_open(void *handle, void *stream, void **comm, int32_t *rank, int32_t *world,
                          int32_t *device) {
  if (!handle)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                             "ring.comm: NULL, but the MPI transport takes the address of an "
                             "MPI_Comm");
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                             "ring.comm: MPI is %s (the caller initialises MPI before a ring call)",
                             finalized ? "finalised" : "not initialised");
  MPI_Comm user;
  memcpy(&user, handle, sizeof user);
  if (user == MPI_COMM_NULL)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "ring.comm: *comm is MPI_COMM_NULL");
  int inter = 0;
  int rc = MPI_Comm_test_inter(user, &inter);
  if (rc != MPI_SUCCESS) return mpi_failed("MPI_Comm_test_inter", rc);
  if (inter)
    return fa_core_set_error(
        FA_ERR_INVALID_ARGUMENT,
        "ring.comm: an intercommunicator; the ring needs an intracommunicator");
  mpi_ring_comm *c = malloc(sizeof *c);
  if (!c) return fa_core_set_error(FA_ERR_OUT_OF_MEMORY, "mpi transport: no memory");
  rc = MPI_Comm_dup(user, &c->comm);
  if (rc != MPI_SUCCESS) {
    free(c);
    return mpi_failed("MPI_Comm_dup", rc);
  }
  MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  int r = 0, w = 0;
  MPI_Comm_rank(c->comm, &r);
  MPI_Comm_size(c->comm, &w);
  *rank = r;
  *world = w;
  *device = -1; /* host memory */
  *comm = c;
  return FA_OK;
}

static fa_status mpi_allreduce_max(void *comm, int64_t *values, int32_t count) {
  mpi_ring_comm *c = comm;
  int rc = MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_INT64_T, MPI_MAX, c->comm);
  return rc == MPI_SUCCESS ? FA_OK : mpi_failed("MPI_Allreduce", rc);
}

static fa_status mpi_exchange_wait(void *comm, void *pending) {
  mpi_pending *p = pending;
  if (!p) return FA_OK;
  int rc = MPI_Waitall(p->count, p->req, MPI_STATUSES_IGNORE);
  free(p);
  return rc == MPI_SUCCESS ? FA_OK : mpi_failed("MPI_Waitall", rc);
}

static fa_status mpi_exchange_start(void *comm, int32_t channel, const void *send, int32_t to,
                                    void *recv, int32_t from, size_t bytes, void **pending) {
  mpi_ring_comm *c = comm;
  const size_t pieces = bytes ? (bytes + PIECE_BYTES - 1) / PIECE_BYTES : 0;
  if (pieces > (size_t)INT_MAX / 2)
    return fa_core_set_error(FA_ERR_UNSUPPORTED, "mpi transport: a message of %zu bytes", bytes);
  mpi_pending *p = malloc(sizeof *p + 2 * pieces * sizeof(MPI_Request));
  if (!p) return fa_core_set_error(FA_ERR_OUT_OF_MEMORY, "mpi transport: no memory");
  p->count = 0;
  /* Pieces of one channel between two ranks match in order: MPI does not overtake messages of the
     same source, tag and communicator. */
  for (size_t i = 0; i < pieces; ++i) {
    const size_t at = i * PIECE_BYTES;
    const int n = (int)(bytes - at < PIECE_BYTES ? bytes - at : PIECE_BYTES);
    int rc = MPI_Irecv((char *)recv + at, n, MPI_BYTE, from, channel, c->comm, &p->req[p->count]);
    if (rc == MPI_SUCCESS) {
      ++p->count;
      rc = MPI_Isend((const char *)send + at, n, MPI_BYTE, to, channel, c->comm, &p->req[p->count]);
    }
    if (rc != MPI_SUCCESS) {
      for (int j = 0; j < p->count; ++j) MPI_Cancel(&p->req[j]);
      MPI_Waitall(p->count, p->req, MPI_STATUSES_IGNORE);
      free(p);
      return mpi_failed("MPI_Isend/MPI_Irecv", rc);
    }
    ++p->count;
  }
  *pending = p;
  return FA_OK;
}

static void mpi_close(void *comm) {
  mpi_ring_comm *c = comm;
  if (!c) return;
  MPI_Comm_free(&c->comm);
  free(c);
}

FA_TRANSPORT_DEFINE(FA_TRANSPORT_MPI, "mpi", mpi_probe, mpi_open, mpi_allreduce_max,
                    mpi_exchange_start, mpi_exchange_wait, mpi_close)
