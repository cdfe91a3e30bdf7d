/*
 * fuzz.h: what the parts of the libFuzzer target share (fuzz_api.c is its entry point and
 * describes it): the input reader, the tensor slots and their backing (fuzz_tensors.c), and the
 * decoding of one input into a call (fuzz_decode.c).
 */
#ifndef FA_TESTS_FUZZ_H
#define FA_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "flash_attn.h"

/* Input reader: bytes past the end read as 0 (the well-formed choice). */
typedef struct reader {
  const uint8_t *p;
  size_t n, at;
} reader;

static inline uint8_t u8(reader *r) { return r->at < r->n ? r->p[r->at++] : 0; }
static inline uint64_t u64(reader *r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= (uint64_t)u8(r) << (8 * i);
  return v;
}

/* A broken oracle: the message, then a trap libFuzzer records as a crash. */
#define FAIL(...)                              \
  do {                                         \
    fprintf(stderr, "fuzz_api: " __VA_ARGS__); \
    fprintf(stderr, "\n");                     \
    __builtin_trap();                          \
  } while (0)

/* Largest buffer the real mode backs (shapes are small; only mutated strides get near it). */
#define CAP_BYTES ((uint64_t)1 << 22)
/* Largest host scratch a run call is made with (fuzz_api.c; the budget under -rss_limit_mb). */
#define FUZZ_RUN_SCRATCH_MAX ((size_t)256 << 20)

/* Every tensor a call may take. */
enum {
  S_Q,
  S_K,
  S_V,
  S_OUT,
  S_LSE,
  S_DOUT,
  S_DQ,
  S_DK,
  S_DV,
  S_CU_Q,
  S_CU_K,
  S_USED,
  S_TABLE,
  S_ALIBI,
  S_CACHE_LENS,
  S_KNEW,
  S_VNEW,
  S_COS,
  S_SIN,
  S_QDS, /* FP8 descales */
  S_KDS,
  S_VDS,
  S_QY, /* fa_quantize of q (fuzz_quantize.c): y and its descale */
  S_QYD,
  S_COUNT
};

typedef struct slot {
  fa_tensor t;
  int used;   /* passed to the call */
  int index;  /* index tensor: contents decoded, always backed */
  int output; /* the call may write it */
  unsigned char *buf;
  size_t bytes;
  unsigned char *snap;
} slot;

typedef struct call {
  int op;   /* 0 fwd, 1 bwd, 2 kvcache, 3..5 their plans, 6/7 workspace sizes fwd/bwd */
  int huge; /* plan/workspace calls only: big tensors over a dummy */
  slot s[S_COUNT];
  int32_t idx_vals[S_COUNT][64]; /* decoded contents of index tensors (first 64 entries) */
} call;

/* 64 bytes no call may read: the data of tensors without elements, or of huge-mode tensors. */
extern unsigned char g_dummy[64];

/* ----------------------------------------------------------------------------------------------
 * fuzz_tensors.c
 * -------------------------------------------------------------------------------------------- */

int64_t sat_add(int64_t a, int64_t b);
/* A huge value (near 2^31, 2^32, 2^63, negative) decoded from the input. */
int64_t pick_big(reader *r);
/* Gives a slot its shape and contiguous strides, and marks it used. */
void set_shape(slot *s, int ndim, const int64_t *shape, fa_dtype dtype);
/* Up to three mutations of one tensor's description (a zero byte leaves it well-formed). */
void mutate(reader *r, slot *s);
/* Backs a slot with memory covering exactly what it addresses; 0 when the input cannot be run
   honestly (too large to back in a mode where the library may touch it). */
int back(call *c, slot *s, uint64_t seed);
/* Writes the decoded index values into an index tensor's logical elements (1-D or 2-D). */
void store_index(slot *s, const int32_t *vals, int64_t count);
void free_call(call *c);
/* Makes output o a view into j's buffer (its own shape, strides and dtype; a byte offset from
   pick, aligned, such that all of it lies in j's buffer): 1, or 0 where it cannot fit. */
int alias_into(slot *o, const slot *j, uint64_t pick);
/* Whether o and j (views of one buffer, j's) have a byte in common: 1 or 0 (-1: no memory). */
/* Prints a slot's tensor (dtype, shape:stride pairs, offset, buffer) on stderr: what a failure
   report needs to read the layout behind it. */
void describe_slot(const char *what, const slot *s);
int shares_byte(const slot *o, const slot *j);
/* A byte mask over n bytes of o's buffer: 1 where o's elements lie (free it), NULL without
   memory. */
unsigned char *footprint_of(const slot *o, size_t n);

/* ----------------------------------------------------------------------------------------------
 * fuzz_ring.c
 * -------------------------------------------------------------------------------------------- */

/* After a forward (op 0) or backward (op 1) that ran with status plain: the same arguments through
   fa_ring_forward / fa_ring_backward on the self transport, with their oracles. Every slot with a
   snapshot must have one (snapshots are re-taken). */
void fuzz_ring_check(call *c, const fa_params *pp, fa_run_info *info, fa_status plain);

/* ----------------------------------------------------------------------------------------------
 * fuzz_decode.c
 * -------------------------------------------------------------------------------------------- */

/* The problem one input describes: which call, its layout bits, its sizes. */
typedef struct problem {
  uint8_t kind; /* the layout byte */
  int run, bwd, kvc, varlen, paged, seqused, alibi, lse_packed;
  int64_t batch, sq, sk, hkv, hq, d, dv, page;
  fa_dtype dt, out_dt;        /* out_dt differs from dt for FP8 inputs */
  int32_t len_q[8], len_k[8]; /* per-sequence lengths (varlen) */
  int64_t tq, tk, mq, mk;     /* their totals and maxima */
  /* fa_quantize of q after a forward (fuzz_quantize.c) */
  int64_t quant_rows;
  int32_t quant_rotate;
  uint64_t quant_seed;
} problem;

/* The call, its layout and its sizes (the first bytes of the input). */
void decode_problem(reader *r, call *c, problem *pb);
/* Every tensor's shape and role, the index tensors' contents; params' max_seqlen_q/k. */
void decode_tensors(reader *r, call *c, problem *pb, fa_params *p);
/* The fa_params fields (a byte per field group; 0 = the default) and the workspace: returns
   the workspace allocated for the call (free it after), or NULL. */
unsigned char *decode_params(reader *r, const problem *pb, fa_params *p);

/* fuzz_quantize.c: fa_quantize of q's slot into y and descale (S_QY, S_QYD) where decoded: a
   status of fa_status, a message on failure, nothing written on failure, nothing but y and
   descale written on success, the CPU backend named. */
void fuzz_quantize_check(call *c, const problem *pb);

#endif /* FA_TESTS_FUZZ_H */
