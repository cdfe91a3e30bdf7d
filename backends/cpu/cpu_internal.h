/*
 * cpu_internal.h: what the CPU plugin's files share: the problem as the kernels see it, the
 * workspace layout (one definition for decide() and run()), and the passes.
 */
#ifndef FA_CPU_INTERNAL_H
#define FA_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/math/mask.h"
#include "core/plugin.h"

/* Largest head dims and tiles the kernels take (decide() refuses larger head dims): q/k up to 576
   and v up to 512, so multi-head latent attention (576/512) runs; CPU_MAX_HEAD_DIM bounds both. */
#define CPU_MAX_HEAD_DIM 576
#define CPU_MAX_HEAD_DIM_V 512
#define CPU_MAX_TILE_M 256
/* The tile plan's query rows (the backward's tiles); the forward widens its query tiles to the
   key tiles' 256 from head dim 64 (cpu_decide.c). */
#define CPU_PLAN_TILE_M 128
/* The few-query-rows path's rows per task (heads_q x seqlen_q): at most this. */
#define CPU_ROWS_PATH_MAX 128
#define CPU_MAX_TILE_N 256

/* Scratch buffers start at this alignment (a cache line, and any vector width). */
#define CPU_ALIGN 64

struct cpu_kernels;

/* What decide() chose, recorded in the decision's payload for run(): the kernel build, the tiles,
   the split-KV chunks, and the two paths that depend on the build and the request. */
typedef struct cpu_choice {
  const struct cpu_kernels *kern; /* the kernel build (cpu_dispatch.c), fixed for the process */
  int32_t tile_m, tile_n;         /* query rows and key rows per tile */
  int32_t splits;                 /* forward: key-range chunks per query tile (1 = no split-KV) */
  int32_t rows_path;              /* the few-query-rows path (cpu_rows_path) */
  int32_t bf16dp;                 /* the bf16 products (cpu_bf16dp_applies) */
  int32_t fp8;                    /* FP8 inputs, run as the float32 request of cpu_fp8.c */
} cpu_choice;
FA_DECISION_PAYLOAD_FITS(cpu_choice);

/* A request reduced to what the passes use. seqlen_q/seqlen_k are the largest sequence lengths
   (max_seqlen_q/k with packed sequences): the task grid is sized by them, and each task looks up
   its own sequence's lengths through cpu_seq_init. */
typedef struct cpu_problem {
  fa_op op;
  const struct cpu_kernels *kern; /* the kernel build decide() chose */
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv;
  int64_t group; /* query heads per KV head: query head h reads KV head h / group */
  int d, dv;     /* head dims of q/k and of v */
  int tm, tn;    /* query rows and key rows per tile */
  int64_t q_tiles, k_tiles;
  int splits; /* forward: key-range chunks per query tile (1 = no split-KV) */
  /* Forward: query heads per task. GQA with few query rows (decoding) stacks the `group` heads
     sharing a KV head into one tile, so each K/V tile is read and converted once for all of
     them; else 1. heads_q / pack tasks per sequence and query tile. */
  int64_t pack;
  float scale;
  /* The score transform (core/math/score.h): with neither, the kernels scale the scores themselves.
   */
  float softcap;
  const fa_tensor *alibi; /* float32 [heads_q] or [batch, heads_q]; NULL without ALiBi */
  int transform;          /* softcap or ALiBi present: scores go through cpu_score_tile */
  /* Dropout (core/math/philox.h); dropout = 0 when p = 0. */
  int dropout;
  uint32_t drop_thr;
  uint64_t drop_seed, drop_offset;
  float drop_scale; /* 1 / (1 - p) */
  /* A ring block's place in its sequence (fa_positions, core/plugin.h): dropout's rows and keys
     and ALiBi's distance are offset by these; without it, 0 and the sequence's own shift. */
  int positioned;
  int64_t pos_q0, pos_k0, pos_shift;
  /* fa_forward_kvcache: q rows are rotated (when rotary_dim > 0) at these positions. */
  int64_t rotary_dim;
  /* fa_forward_kvcache with few query rows per task (cpu_rows_path): attend through
     cpu_attend_rows instead of the tile products. */
  int rows_path;
  /* fa_forward on bf16 with the avx512bf16 or amx kernel table and even head dims: S = Q·Kᵀ and
     P·V by the bf16 products (cpu_bf16dp.c, cpu_amx.c), P rounded to bf16. fa_backward on bf16
     with the amx table and even head dims: its five products on them, P and dS rounded to bf16. */
  int bf16dp;
  /* The bf16 forward on the tiled products (the amx table's gemm_bf16_tiled, cpu_amx.h): bf16dp
     without dropout, tiles and head dims multiples of 32. */
  int pairs_tiled;
} cpu_problem;

/* Whether the request takes the few-query-rows path (decide() asks, once): fa_forward_kvcache, at
   most CPU_ROWS_MAX query rows, heads_q x seqlen_q <= CPU_ROWS_PATH_MAX (a task holds every head's
   rows), head dims multiples of CPU_ROWS_DIM_MULTIPLE, K and V caches with contiguous rows. */
int cpu_rows_path(const fa_request *req);

/* Whether the request runs on the bf16 products of the kernel build kern (cpu_problem.bf16dp). */
int cpu_bf16dp_applies(const fa_request *req, const struct cpu_kernels *kern);

/* The problem of a request under a choice (decide()'s, or one it is still making). */
void cpu_problem_init(cpu_problem *pb, const fa_request *req, const cpu_choice *choice);

/* Rows of one tensor for one sequence: element [row, h, c] is at
   data[off(row) + h * hs + c * cs], off(row) = base + row * rs, or through the page table. */
typedef struct cpu_rows {
  void *data;
  fa_dtype dtype;
  int64_t base, rs, hs, cs;
  const int32_t *pages; /* paged KV: this sequence's block_table row, else NULL */
  int64_t page_stride;  /* elements between block_table entries */
  int64_t block_stride; /* elements between pages of the pool */
  int64_t page_size;
} cpu_rows;

static inline int64_t cpu_rows_off(const cpu_rows *r, int64_t row, int64_t h) {
  if (r->pages) {
    int64_t blk = r->pages[(row / r->page_size) * r->page_stride];
    return blk * r->block_stride + (row % r->page_size) * r->rs + h * r->hs;
  }
  return r->base + row * r->rs + h * r->hs;
}

/* One sequence (batch entry) as the passes see it: its lengths, its mask, where its rows are. */
typedef struct cpu_seq {
  int64_t b;
  int64_t sq;     /* query rows */
  int64_t sk;     /* keys attended (seqused_k, or the cache length after the append) */
  int64_t k_rows; /* key rows the k/dk tensors hold for it (>= sk): dk/dv rows past sk are 0 */
  int64_t pos0;   /* fa_forward_kvcache: cache_seqlens[b], the first appended position */
  fa_mask mask;
  cpu_rows q, k, v, out, dout, dq, dk, dv;
  float *lse; /* lse of (h, i) at lse[h * lse_hs + i * lse_rs]; NULL without lse */
  int64_t lse_hs, lse_rs;
} cpu_seq;

void cpu_seq_init(const fa_request *req, const cpu_problem *pb, int64_t b, cpu_seq *sq);

/* An int32 index tensor's element i (1-D, host memory, strides applied). */
int32_t cpu_index_at(const fa_tensor *t, int64_t i);

/* Rows [r0, r0 + rows) of a tile see the keys [c0, c0 + nc) through the sequence's mask: per row
   the visible columns [jlo, jhi) relative to c0 (for FA_TILE_PARTIAL tiles). */
void cpu_tile_row_bounds(const cpu_seq *sq, int64_t r0, int rows, int64_t c0, int nc, int *jlo,
                         int *jhi);

/* The score transform of core/math/score.h on a tile of raw q·k products (rows r0.., keys c0.. of
   the sequence, query head h): visible elements become fa_score(...). With grad non-NULL (backward,
   softcap), grad[i * lds + j] = fa_score_softcap_grad of the capped score. */
void cpu_score_tile(const cpu_problem *pb, const cpu_seq *sq, int64_t h, int64_t r0, int mr,
                    int64_t c0, int nc, float *s, ptrdiff_t lds, const int *jlo, const int *jhi,
                    float *grad);

/* Dropout of core/math/philox.h on a tile: forward, zeroes the dropped probabilities (the 1/(1-p)
   factor is applied to the output once); cpu_dropout_factors writes Z = keep / (1 - p). */
void cpu_dropout_tile(const cpu_problem *pb, const cpu_seq *sq, int64_t h, int64_t r0, int mr,
                      int64_t c0, int nc, float *s, ptrdiff_t lds);
void cpu_dropout_factors(const cpu_problem *pb, const cpu_seq *sq, int64_t h, int64_t r0, int mr,
                         int64_t c0, int nc, float *z, ptrdiff_t ldz);

/* Rotary embedding (fa_forward_kvcache): rotates row x (fp32, head_dim wide) at position pos and
   rounds it to the storage dtype once. */
void cpu_rotary_row(const fa_request *req, const cpu_problem *pb, float *x, int64_t pos);

/* fa_forward_kvcache's append: k_new/v_new (rotated) into the caches. */
void cpu_kvcache_append(const fa_request *req, const cpu_problem *pb);

/* Split-KV: the key tiles [*t0, *t1) chunk c of n covers out of the tiles [first, last). */
void cpu_split_chunk(int64_t first, int64_t last, int c, int n, int64_t *t0, int64_t *t1);

/* Carves a per-thread scratch region: advances *offset by the floats' bytes (aligned) and
   returns the buffer, or NULL when base is NULL (sizing only). */
float *cpu_scratch_take(char *base, size_t *offset, size_t floats);

/* Per-thread scratch bytes of each pass (each pass's one layout, also used for sizing). */
size_t cpu_forward_thread_bytes(const cpu_problem *pb);
size_t cpu_backward_thread_bytes(const cpu_problem *pb);

/* Independent tasks of the op's widest parallel loop: the most threads it can use. */
int64_t cpu_parallel_tasks(const cpu_problem *pb, fa_op op);

/* Workspace: [alignment slack][shared: D for the backward pass; the chunks' partial (m, l, o) of
   a split forward, then the forward's shared K/V tiles (cpu_kv_share.h)][one scratch region per
   thread]. threads = number of per-thread regions. */
size_t cpu_workspace_bytes(const cpu_problem *pb, fa_op op, int threads);
/* Splits a workspace of `bytes` bytes: the shared region, the per-thread regions, how many. */
typedef struct cpu_workspace {
  float *shared;
  void *kv_share; /* the forward's shared K/V tiles, NULL without */
  char *threads_base;
  size_t thread_bytes;
  int threads;
} cpu_workspace;
fa_status cpu_workspace_split(const cpu_problem *pb, fa_op op, void *workspace, size_t bytes,
                              cpu_workspace *ws);

/* Threads a parallel loop of `tasks` tasks uses with this workspace. */
int cpu_team_size(const cpu_workspace *ws, int64_t tasks);

/* Floats of one chunk's partial result in a split forward: o [tm][dv], m [tm], l [tm]. */
size_t cpu_split_partial_floats(const cpu_problem *pb);

fa_status cpu_forward(const fa_request *req, const cpu_problem *pb, const cpu_workspace *ws);

/* The few-query-rows path (cpu_decode.c): the query heads [h0, h0 + heads), mr <= CPU_ROWS_MAX
   rows each from r0 (q: fp32 [heads x mr][d], head by head), over the keys [k0, k1) of the
   sequence, into the running (m, l, o [heads x mr][dv]); s is scratch of heads x mr x min(tn, 32)
   floats. */
void cpu_attend_rows(const cpu_problem *pb, const struct cpu_kernels *kern, const cpu_seq *sq,
                     int64_t h0, int heads, int64_t r0, int mr, const float *q, float *s,
                     int64_t k0, int64_t k1, float *m, float *l, float *o);
fa_status cpu_backward(const fa_request *req, const cpu_problem *pb, const cpu_workspace *ws);

/* The fast-memory budget for tiles (half the per-core L2), measured once. */
size_t cpu_fast_memory_bytes(void);

/* The plugin table's functions (fa_plugin in core/plugin.h). */
void cpu_probe(fa_plugin_probe *out);
void cpu_decide(const fa_request *req, fa_decision *out);

/* cpu_fp8.c: an FP8 forward runs as a float32 request on dequantized copies of q, k, v, with a
   float32 out, all contiguous at the start of the workspace (`bytes` of them). */
#define CPU_FP8_ALIGN 64 /* bytes; each copy starts at such a boundary */
typedef struct cpu_fp8_inner {
  fa_params params;
  fa_tensor q, k, v, out;
  fa_request req;
  size_t bytes;
} cpu_fp8_inner;
/* Builds the float32 request of an FP8 one with its copies at base (NULL: shapes only, for
   decide). 0 when the copies' size does not fit in size_t. */
int cpu_fp8_inner_init(const fa_request *req, char *base, cpu_fp8_inner *in);
void cpu_fp8_dequantize(const fa_request *req, const cpu_fp8_inner *in);
/* The float32 output rounded into req->out. */
void cpu_fp8_store_out(const fa_request *req, const cpu_fp8_inner *in);

/* The descale of element (b, t, h) of an FP8 tensor: d[b or 0][h or 0][t / rows] (a size-1
   dimension of d is shared; rows 0: one block). */
static inline float *cpu_descale_ptr(const fa_tensor *d, int64_t rows, int64_t b, int64_t h,
                                     int64_t t) {
  return (float *)fa_tensor_base(d) + (d->shape[0] > 1 ? b : 0) * d->strides[0] +
         (d->shape[1] > 1 ? h : 0) * d->strides[1] + (rows > 0 ? t / rows : 0) * d->strides[2];
}

/* cpu_quantize.c: the plugin's fa_quantize. */
fa_status cpu_quantize(const fa_quantize_request *req, char *kernel);

#endif /* FA_CPU_INTERNAL_H */
