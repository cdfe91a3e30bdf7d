/*
 * test_errors.h: the parts of test_errors (tests/test_errors.c is its main and describes the
 * rules): the dense fixture and the run of one case (call.c), the parameter cases (params.c), the
 * kvcache / varlen / paged / ALiBi / seqused_k cases (features.c).
 */
#ifndef FA_TESTS_TEST_ERRORS_H
#define FA_TESTS_TEST_ERRORS_H

#include <stddef.h>

#include "flash_attn.h"
#include "tensor_util.h"

enum { T_Q, T_K, T_V, T_OUT, T_LSE, T_DOUT, T_DQ, T_DK, T_DV, T_COUNT };
extern const char *const tensor_names[T_COUNT];

/* The valid problem: GQA (6 query heads over 3), every size distinct, so a check that compares
   the wrong pair of dimensions cannot pass by coincidence. */
enum { B = 2, SQ = 5, SK = 7, HQ = 6, HKV = 3, D = 8, DV = 4 };

typedef struct fixture {
  tu_tensor t[T_COUNT];
  tu_tensor alibi; /* float32 [HQ], for the feature probe */
} fixture;

typedef enum op_kind { OP_FWD, OP_BWD } op_kind;

/* One call's arguments: copies of the fixture's views that a case may break. */
typedef struct call {
  fa_params params;
  const fa_params *pp;
  fa_params *big; /* an oversized params block (struct_size tests), or NULL */
  fa_tensor view[T_COUNT];
  fa_tensor *arg[T_COUNT]; /* what is passed: &view[i], or NULL */
  fa_tensor alibi;
  fa_run_info info;
  fa_run_info *pinfo;
} call;

/* Allocates a tensor larger than the problem in every dimension and shows only the problem's
   shape (see call.c). */
int alloc_view(tu_tensor *x, fa_dtype dt, int ndim, const int64_t *shape);
int fixture_init(fixture *f);
void fixture_free(fixture *f);

/* Whether msg names one of the '|'-separated alternatives (see call.c). */
int names_any(const char *msg, const char *alts);

/* Accepted statuses: a bit per fa_status. */
#define S(st) (1u << (st))
#define ACCEPT_INVALID S(FA_ERR_INVALID_ARGUMENT)

typedef void (*mutator)(call *c, fixture *f);

/* One case: how to break the call and what must come back. */
typedef struct spec {
  op_kind op;
  const char *name;
  mutator mut;
  unsigned accept; /* statuses accepted (S(...) bits) */
  int allow_ok;    /* a valid request a backend may refuse: FA_OK is accepted too */
  int no_ws;       /* the broken argument is not one fa_*_workspace_size takes (run_info) */
  const char *names;
} spec;

/* Mutates, calls the op, then its plan and workspace-size twins on the same arguments; prints
   the case's line and counts it. */
void run_case(fixture *f, const spec *sp);

/* Prints one case's line ("PASS|FAIL <kind> <name>: <status> \"<message>\"", and under a failure
   what went wrong) and counts it. */
void report_case(const char *why, const char *kind, const char *name, fa_status st,
                 const char *msg);

/* Appends a formatted reason to why (n bytes; *used so far). */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void why_add(char *why, size_t n, size_t *used, const char *fmt, ...);

/* The counts every case adds to. */
extern int g_pass, g_fail;

/* params.c: the parameter cases of one op. */
void run_params(fixture *f, op_kind op);

/* aliasing.c: outputs sharing memory with inputs or outputs; unhonoured device ids and streams. */
void run_aliasing(fixture *f);

/* features.c: fa_forward_kvcache, varlen, paged KV, ALiBi and seqused_k. */
void run_features(void);

#endif /* FA_TESTS_TEST_ERRORS_H */
