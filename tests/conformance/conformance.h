/*
 * conformance.h: what the parts of the conformance suite share (tests/conformance.c is its main
 * and describes the suite; the parts live in tests/conformance/).
 *
 *   device.c        the DEVICE HOOK: tensors in the backend's memory
 *   needs.c         what a case needs, and whether a refusal is a skip or a failure
 *   cases.c         the plain cases and the --quick subset
 *   fcases.c        the feature cases
 *   kernels.c       the kernel a call must report, from public facts only
 *   check.c         failure reports and the output checks
 *   run_plain.c     one plain case: forward without and with lse, backward
 *   fprep.c         the inputs of a feature case: reference problem, params, index tensors
 *   run_features.c  one feature case (window, softcap, ALiBi, dropout, varlen, paged, split-KV)
 *   run_kvcache.c   one fa_forward_kvcache case
 *   run_fp8.c       one FP8 case: fa_quantize'd inputs, the forward against the dequantized ones
 *
 * The suite sees the library through api/flash_attn.h and the run report only: no backend's
 * internal header is included anywhere in it.
 */
#ifndef FA_TESTS_CONFORMANCE_H
#define FA_TESTS_CONFORMANCE_H

#include <stddef.h>
#include <stdint.h>

#include "flash_attn.h"
#include "reference.h"
#include "tensor_util.h"

/* ----------------------------------------------------------------------------------------------
 * device.c: the DEVICE HOOK
 * -------------------------------------------------------------------------------------------- */

typedef struct dev_tensor {
  fa_tensor view; /* what the library gets: device pointer (or cl_mem), host strides */
  void *mem;      /* the device allocation (NULL for the CPU, which uses the host buffer) */
  size_t bytes;
} dev_tensor;

typedef struct dev_ops {
  fa_device_kind kind;
  const char *label;
  /* Allocates device memory the size of host's whole buffer; view mirrors host's view. */
  int (*alloc)(dev_tensor *d, const tu_tensor *host, char *err, size_t n);
  /* Copies host's whole buffer to the device. */
  int (*copy_in)(dev_tensor *d, const tu_tensor *host, char *err, size_t n);
  /* Copies the device buffer back over host's whole buffer. */
  int (*copy_out)(tu_tensor *host, const dev_tensor *d, char *err, size_t n);
  void (*release)(dev_tensor *d);
} dev_ops;

/* The copy routines of a device kind (every kind has an entry). */
const dev_ops *dev_ops_for(fa_device_kind kind);

/* Puts host's whole buffer in the backend's memory: allocation and copy. */
int dev_put(const dev_ops *ops, dev_tensor *d, const tu_tensor *host, char *err, size_t n);

/* Releases n device tensors and frees their host tensors (zeroed or already released is fine). */
void dev_release_all(const dev_ops *ops, dev_tensor *d, tu_tensor *t, int n);

/* ----------------------------------------------------------------------------------------------
 * The backend under test
 * -------------------------------------------------------------------------------------------- */

enum { R_FAIL = 0, R_PASS = 1, R_SKIP = 2 };

/* Layout properties that fa_backend_info's features do not cover; the suite probes them once. */
enum { P_STRIDED_LAST_DIM, P_UNALIGNED, P_COUNT };
extern const char *const probe_names[P_COUNT];

typedef struct backend_ctx {
  int32_t id;
  const char *name;
  const dev_ops *ops;
  const fa_backend_desc *desc;
  const char *require;       /* --require's comma list, or NULL */
  const char *kernel_family; /* --kernel-family: params.kernel_family of every call, or NULL */
  const char *cuda_prefix;   /* --kernel-prefix: the cuda backend's kernel names start with it */
  int cuda_fa3;  /* the cuda backend may run its fa3 family here (kernels.c's cuda_fa3_device) */
  int cuda_sm90; /* the cuda device is sm_90, not run as sm_80 (kernels.c's cuda_sm90_device) */
  int probe_ok[P_COUNT];
  char probe_why[P_COUNT][256];
} backend_ctx;

/* ----------------------------------------------------------------------------------------------
 * check.c: a case's failure report and the output checks
 * -------------------------------------------------------------------------------------------- */

/* Failure details of a case, printed under its line. */
typedef struct report {
  char text[4096];
  size_t used;
  int failed;
} report;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void fail(report *r, const char *fmt, ...);

double now_s(void);

/* Copies a device tensor back over its host buffer; a failure is the case's (label names it). */
int dev_get(report *rep, const backend_ctx *bk, tu_tensor *host, const dev_tensor *d,
            const char *label);

/* Prints a case's line (PASS/FAIL with the summary and time, or SKIP with the reason), and under
   a failure its details and the command that replays it. */
void case_print(int result, const char *name, const char *summary, const char *skip,
                const report *rep, const backend_ctx *bk, uint64_t run_seed, double t0);

/* Checks one output with the pass rule; appends "label err/tol" to the summary. */
void check_output(report *rep, char *summary, size_t sn, const char *label, const tu_tensor *x,
                  const ref_result *r64, const ref_result *rn, ref_which w,
                  const unsigned char *masked, fa_dtype dtype);

/* Where a library tensor's elements live in the reference's padded dense arrays. */
typedef enum { MAP_ID = 0, MAP_PACKED_Q, MAP_PACKED_K, MAP_LSE_PACKED, MAP_LSE_PADDED } map_kind;

typedef struct fmap {
  map_kind kind;
  int64_t batch, max_rows, heads, inner; /* inner: heads * dim of one token (lse: heads_q) */
  const int64_t *cu;                     /* [batch + 1] offsets (packed) */
  const int64_t *lens;                   /* rows per sequence (padded lse) */
  int64_t total;
} fmap;

/* check_output through a map: elements that map nowhere must be untouched. */
void fcheck_output(report *rep, char *summary, size_t sn, const char *label, const tu_tensor *x,
                   const fmap *m, const ref_result *r64, const ref_result *rn, ref_which w,
                   const unsigned char *masked, fa_dtype dtype);

/* ----------------------------------------------------------------------------------------------
 * needs.c: what a case needs, and refusals
 * -------------------------------------------------------------------------------------------- */

/* Position of name in a comma list (spaces after commas allowed), or -1; list_has: >= 0. */
int list_find(const char *list, const char *name);
int list_has(const char *list, const char *name);

typedef struct needs {
  const char *f[32];
  int n;
} needs;

void need(needs *nd, const char *f);

/* The needs of the problem's shape: dtype, mask alignment, head sharing, head dims, lse, bwd. */
void need_shape(needs *nd, fa_dtype dt, int causal, int top_left, int64_t hq, int64_t hkv,
                int64_t d, int64_t dv, int lse, int bwd);

/* The layout needs of the data tensors a call gets (NULL entries are skipped). */
void need_views(needs *nd, const fa_tensor *const *data, int count);

/* What the kernel family named by --kernel-family lacks for a case, as "family:" needs.
   fwd_only: the case makes no backward call; seqs: it uses varlen, seqused_k, paged KV, num_splits
   > 1 or the KV cache. */
void need_family(needs *nd, const backend_ctx *bk, int fwd_only, int seqs, int64_t d, int64_t dv,
                 int64_t sq, int64_t sk, float softcap, const fa_tensor *const *data, int count);

/* A call the backend refused: R_SKIP with the reason in skip when some need is not served (and
   none of those is required by --require); R_FAIL otherwise. */
/* The layout a feature case gives a tensor on this backend: its own, or contiguous where the
   backend refused that layout's probe (strided last dim, unaligned rows), so that the case tests
   its feature there instead of being skipped for a layout the plain cases cover. */
tu_layout_kind fit_layout(const backend_ctx *bk, tu_layout_kind kind);
int refusal(report *rep, const backend_ctx *bk, const needs *nd, const char *call, fa_status st,
            char *skip, size_t sn);

/* ----------------------------------------------------------------------------------------------
 * cases.c and fcases.c: the case lists
 * -------------------------------------------------------------------------------------------- */

enum { CM_NONE = 0, CM_BR = 1, CM_TL = 2 };
extern const char *const cm_names[3];

/* Layouts: the tu_ kinds for every tensor, or MIXED (each tensor a different one). */
#define L_MIXED TU_LAYOUT_COUNT_
#define L_COUNT (TU_LAYOUT_COUNT_ + 1)

/* The tensors of a plain case (feature cases borrow the layouts of the same roles). */
enum { T_Q, T_K, T_V, T_DOUT, T_OUT0, T_OUT, T_LSE, T_DQ, T_DK, T_DV, T_COUNT };

tu_layout_kind tensor_layout(int layout, int t);
const char *layout_name(int layout);

extern const fa_dtype k_dtypes[3];

typedef struct conf_case {
  char name[128];
  fa_dtype dtype;
  int64_t b, sq, sk, hq, hkv, d, dv;
  int cm;      /* causal mode */
  int layout;  /* tu_layout_kind or L_MIXED */
  float scale; /* softmax_scale passed (0 = the default 1/sqrt(d)) */
  double cost; /* estimated work, for ordering the quick subset */
  int quick;
} conf_case;

typedef struct case_list {
  conf_case *v;
  int n, cap;
} case_list;

void build_cases(case_list *L);
void mark_quick(case_list *L);

#define FMAXB 6

/* A feature case: the plain case's fields plus the features it turns on. */
typedef struct fcase {
  char name[160];
  fa_dtype dtype;
  int64_t b, hq, hkv, d, dv;
  int64_t sq, sk; /* dense extents (varlen: derived from the lengths) */
  int cm, layout;
  float scale;
  int win;
  int64_t wl, wr;
  float softcap;
  int alibi; /* 0 none, 1 [heads_q], 2 [batch, heads_q] */
  float dropout;
  int varlen;     /* packed q (and packed k unless paged) */
  int lse_packed; /* varlen: lse [heads_q, total_q] instead of padded [batch, heads_q, max_q] */
  int64_t lq[FMAXB], lk[FMAXB];
  int64_t extra_q; /* packed q tokens past the last sequence (must stay untouched) */
  int seqused;
  int64_t used[FMAXB];
  int64_t page; /* > 0: paged k/v through a shuffled block table */
  int64_t max_blocks;
  int splits; /* -1: not a split case; else num_splits run and compared with num_splits 1 */
  int bwd;
  int determ; /* params.deterministic, and a second run that must match the first bitwise */
  /* fa_forward_kvcache */
  int kvc;
  int64_t cache_len[FMAXB];
  int64_t snew; /* tokens appended (0: no k_new) */
  int64_t rot;  /* rotary dim (0: none) */
  int inter;    /* rotary interleaved */
  int rot_f32;  /* rotary tables f32 (else q's dtype) */
  /* FP8 inputs (fa_forward): q, k, v of dtype fp8, out of dtype `dtype` */
  fa_dtype fp8;           /* 0: not an FP8 case */
  int dsl;                /* descales: 0 none, 1 per tensor, 2 per (batch, head), 3 per block */
  int64_t rows_q, rows_k; /* dsl 3: rows per descale block */
  int rotate;             /* q and k rotated with one seed (incoherent processing) */
  double cost;
  int quick;
} fcase;

typedef struct fcase_list {
  fcase *v;
  int n, cap;
} fcase_list;

void build_fcases(fcase_list *L);
void mark_fquick(fcase_list *L);

/* Feature names as fa_backend_info reports them, that a case needs. */
int fcase_features(const fcase *c, const char **f, int max);

/* Dense extents of a feature case's reference problem. */
int64_t fc_max_q(const fcase *c);
int64_t fc_max_k(const fcase *c);

/* The --quick tags: every case whose tags are not all seen yet (cheapest first) is quick. */
typedef struct tag_set {
  char (*v)[48];
  int n, cap;
} tag_set;
int tag_has(const tag_set *s, const char *t);
void tag_add(tag_set *s, const char *t);

/* ----------------------------------------------------------------------------------------------
 * kernels.c: the kernel a call must report
 * -------------------------------------------------------------------------------------------- */

/* The public facts of one call that decide its kernel's name. */
typedef struct kernel_facts {
  const char *op; /* "fwd", "bwd" or "kvcache" */
  fa_dtype dtype;
  int64_t hq, hkv, sq, sk, d, dv; /* sq, sk: the dense extents */
  int causal, window, softcap, alibi, dropout, varlen, paged, seqused;
  int determ;    /* params.deterministic */
  int rows_path; /* kvcache on the CPU: the few-query-rows path applies */
} kernel_facts;

kernel_facts facts_of_case(const conf_case *c, int bwd);
kernel_facts facts_of_fcase(const fcase *c, const char *op);

/* Checks the run report of a call against the backend's naming rule, and against the plan
   fa_plan_* gave for the same arguments (plan may be NULL). */
void check_info(report *rep, const backend_ctx *bk, const kernel_facts *k, const char *call,
                const fa_run_info *info, const fa_run_info *plan);

/* The CPU build the suite expects for one call (also used at start-up to skip a forced
   FA_CPU_ISA this CPU cannot run). */
const char *cpu_expected_isa_for(const char *op, fa_dtype dt, int64_t d, int64_t dv);

/* Whether fa_backend_info says the cuda backend may run its fa3 family on this machine (listed,
   an sm_90 device not run as sm_80) and --kernel-family does not ask for fa2. */
int cuda_fa3_device(const fa_backend_desc *desc, const char *family);
/* Whether the cuda backend's device is an sm_90 one not run as sm_80. */
int cuda_sm90_device(const fa_backend_desc *desc);

/* What keeps fa3 from one call of this shape (FA3_GAP_ bits; 0: it takes it): it has head dims
   64, 96, 128, 192 and 256 with head_dim_v == head_dim, no softcap, at least one key, and for the
   backward at least one query row. */
enum { FA3_GAP_EMPTY = 1, FA3_GAP_SOFTCAP = 2, FA3_GAP_HEAD_DIM = 4 };
int cuda_fa3_gaps(int bwd, int64_t d, int64_t dv, int64_t sq, int64_t sk, float softcap);
/* Whether the cuda backend's fa3 backward runs sequences at head dim d (docs/backends.md): 64, 96
   and 128; 192 and 256 without a mask (causal or window), or with kernel_family fa3 named. */
int cuda_fa3_bwd_seqs_takes(int64_t d, int masked, int named_fa3);

/* ----------------------------------------------------------------------------------------------
 * Running cases
 * -------------------------------------------------------------------------------------------- */

int run_case(const conf_case *c, const backend_ctx *bk, uint64_t run_seed);

/* Per-case run state shared with the skip decision. */
typedef struct frun {
  const backend_ctx *bk;
  char skip[512];
} frun;

int run_fcase(const fcase *c, frun *R, uint64_t run_seed);
int run_fp8case(const fcase *c, frun *R, uint64_t run_seed);
int run_kvcase(const fcase *c, frun *R, uint64_t run_seed);

/* fprep.c: what run_fcase and run_kvcase share. */

/* A refused call (see refusal) of a feature case, whose needs are its features, its shape's and
   those of the data tensors the call got. */
int frefused(report *rep, frun *R, const fcase *c, const fa_tensor *const *data, int n,
             const char *call, fa_status st);

enum { I_CUQ, I_CUK, I_USED, I_TABLE, I_ALIBI, I_COUNT };
extern const char *const i_names[I_COUNT];

/* Fills the reference problem and ext of a feature case (the lens and slopes arrays are the
   caller's: FMAXB and FMAXB * 64 entries). */
void fproblem(const fcase *c, ref_problem *p, ref_ext *x, int64_t *lens_q, int64_t *lens_k,
              double *slopes);

/* Whether a call asked for `asked` key pieces (num_splits > 0) ran what it may report: that many,
   or, where its keys (`keys` of them) have fewer tiles of the reported tile_n, one piece a tile (a
   backend whose pieces are whole key tiles says so in its run report: docs/backends.md). */
int splits_honoured(int asked, const fa_run_info *info, int64_t keys);

/* The params of a feature case's calls; it[] holds the index tensors in the backend's memory. */
void fparams(const fcase *c, const backend_ctx *bk, const ref_ext *x, fa_params *params,
             const dev_tensor *it);

/* A 1-D or 2-D int32 host tensor with the given values (snapshotted). */
int make_i32(tu_tensor *t, int ndim, const int64_t *shape, const int64_t *vals);

/* The ALiBi slopes tensor ([heads_q] or [batch, heads_q]) with fproblem's values. */
int make_alibi(tu_tensor *t, const fcase *c, const double *slopes);

/* A block table of batch * max_blocks entries drawn from nblk pages, shuffled (malloc'd). */
int64_t *shuffled_table(const fcase *c, int64_t nblk, int reversed, tu_rng *rng);

/* dst[di with its last axis = c] = src[si with its last axis = c] for c < cols. */
void copy_row(tu_tensor *dst, const int64_t *di, const tu_tensor *src, const int64_t *si,
              int64_t cols);

#endif /* FA_TESTS_CONFORMANCE_H */
