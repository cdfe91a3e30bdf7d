/* fa3_fwd_hd64.cu: the FlashAttention-3 forward configurations of padded head dim 64. */
#define FA3_FWD_HD 64
#include "fa3_fwd_launch.cuh"

FA3_FWD_CONFIGS(FA3_DEFINE)
