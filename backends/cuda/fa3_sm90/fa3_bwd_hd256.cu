/* fa3_bwd_hd256.cu: the FlashAttention-3 backward's main kernel at head dim 256 (fa3_bwd_wide.cuh).
 */
#include "fa3_bwd_launch.cuh"

FA3_BWD_DEFINE(256)
