/* fa3_bwd_hd128.cu: the FlashAttention-3 backward's main kernel at head dim 128. */
#include "fa3_bwd_launch.cuh"

FA3_BWD_DEFINE(128)
