/*
 * host_test.h: what the CUDA backend's host-only tests share (test_cuda_tail_plan.c,
 * test_cuda_fa3_pick.c): a failure flag and EXPECT, which prints the failed condition's place and
 * a message and carries on.
 */
#ifndef FA_TESTS_CUDA_HOST_TEST_H
#define FA_TESTS_CUDA_HOST_TEST_H

#include <stdio.h>

static int g_failed = 0;

#define EXPECT(cond, ...)                         \
  do {                                            \
    if (!(cond)) {                                \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
      g_failed = 1;                               \
    }                                             \
  } while (0)

#endif /* FA_TESTS_CUDA_HOST_TEST_H */
