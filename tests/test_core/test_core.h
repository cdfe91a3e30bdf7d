/*
 * test_core.h: the parts of test_core (tests/test_core.c is its main), one area of core/ a file.
 * Each test_* function runs one or more cases of tests/harness.h.
 */
#ifndef FA_TESTS_TEST_CORE_H
#define FA_TESTS_TEST_CORE_H

#include "harness.h"

/* dropout.c */
void test_philox_kat(void);
void test_dropout_counter_layout(void);
void test_dropout_threshold(void);
void test_dropout_rate(void);

/* softmax.c */
void test_softmax_merge_algebra(void);
void test_softmax_split_row(void);
void test_softmax_empty_rows(void);

/* mask.c */
void test_mask_key_range(void);
void test_mask_tile_class(void);
void test_mask_row_range(void);
void test_mask_full_rows(void);
void test_softcap_grad_forms(void);

/* dtype.c */
void test_dtype_rounding(void);
void test_dtype_round_trip(void);

/* fp8.c */
void test_fp8_conversions(void);
void test_hadamard_rotation(void);

/* strbuf.c */
void test_strbuf_matches_snprintf(void);

/* env.c */
void test_env_int(void);

/* plan.c */
void test_plan_invariants(void);

#endif /* FA_TESTS_TEST_CORE_H */
