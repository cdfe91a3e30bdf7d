/* fa3_bwd_hd64.cu: the FlashAttention-3 backward's main kernel at head dim 64. */
#include "fa3_bwd_launch.cuh"

FA3_BWD_DEFINE(64)
