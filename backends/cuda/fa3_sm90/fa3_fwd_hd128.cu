/* fa3_fwd_hd128.cu: the FlashAttention-3 forward configurations of padded head dim 128. */
#define FA3_FWD_HD 128
#include "fa3_fwd_launch.cuh"

FA3_FWD_CONFIGS(FA3_DEFINE)
