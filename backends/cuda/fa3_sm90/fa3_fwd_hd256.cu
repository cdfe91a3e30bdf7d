/* fa3_fwd_hd256.cu: the FlashAttention-3 forward configurations of padded head dim 256. */
#define FA3_FWD_HD 256
#include "fa3_fwd_launch.cuh"

FA3_FWD_CONFIGS(FA3_DEFINE)
