/*
 * ring_plan_check.h: test_ring's check of core/ring_plan.c's blocks (ring_plan_check.c).
 */
#ifndef FA_TESTS_RING_PLAN_CHECK_H
#define FA_TESTS_RING_PLAN_CHECK_H

void ring_plan_cases(void);

#endif /* FA_TESTS_RING_PLAN_CHECK_H */
