/*
 * hg_nogpulib.h: the few ROCm device-library functions the kernels reach through HIP's headers
 * (thread and block indices, the barrier's fences, exp2f, logf, fmaxf, tanhf), defined here for a
 * target whose device library Debian's rocm-device-libs 5.2 lacks: RDNA3 (gfx1100), compiled with
 * -nogpulib (rdna/hg_kernels_rdna.cu). Each maps to a compiler builtin (an AMDGPU instruction)
 * except tanh, computed from exp2; the precision is that of the hardware's v_exp_f32/v_log_f32
 * (about 1 ulp), not the device library's, and it is not run by the test suite (no AMD GPU).
 */
#ifndef FA_HIP_HG_NOGPULIB_H
#define FA_HIP_HG_NOGPULIB_H

#include <hip/hip_runtime.h>

extern "C" {

__device__ size_t __ockl_get_local_id(uint dim) {
  return dim == 0   ? __builtin_amdgcn_workitem_id_x()
         : dim == 1 ? __builtin_amdgcn_workitem_id_y()
                    : __builtin_amdgcn_workitem_id_z();
}

__device__ size_t __ockl_get_group_id(uint dim) {
  return dim == 0   ? __builtin_amdgcn_workgroup_id_x()
         : dim == 1 ? __builtin_amdgcn_workgroup_id_y()
                    : __builtin_amdgcn_workgroup_id_z();
}

/* From the HSA dispatch packet: workgroup sizes (16-bit) at byte 4, grid sizes in work-items
   (32-bit) at byte 12. */
__device__ size_t __ockl_get_num_groups(uint dim) {
  const char *packet = (const char *)__builtin_amdgcn_dispatch_ptr();
  const uint32_t grid = ((const uint32_t *)(packet + 12))[dim < 3 ? dim : 0];
  const uint32_t group = ((const uint16_t *)(packet + 4))[dim < 3 ? dim : 0];
  return (grid + group - 1) / group;
}

/* __syncthreads' fences (release before the barrier, acquire after), workgroup or wider scope. */
__device__ void __atomic_work_item_fence(__cl_mem_fence_flags flags, __memory_order order,
                                         __memory_scope scope) {
  (void)flags;
  if (scope == __memory_scope_work_group) {
    if (order == __memory_order_acquire)
      __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    else if (order == __memory_order_release)
      __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    else
      __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  } else {
    if (order == __memory_order_acquire)
      __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent");
    else if (order == __memory_order_release)
      __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent");
    else
      __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent");
  }
}

__device__ float __ocml_exp2_f32(float x) { return __builtin_exp2f(x); }
__device__ float __ocml_log_f32(float x) { return __builtin_logf(x); }
__device__ float __ocml_fmax_f32(float x, float y) { return __builtin_fmaxf(x, y); }

/* tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2 |x|) in (0, 1]: no overflow; for tiny |x| the
   absolute error stays near one ulp of 1 (softcap scales it by the cap). */
__device__ float __ocml_tanh_f32(float x) {
  const float e = __builtin_exp2f(-2.8853900817779268f * __builtin_fabsf(x)); /* 2 / ln 2 */
  return __builtin_copysignf((1.0f - e) / (1.0f + e), x);
}
}

#endif /* FA_HIP_HG_NOGPULIB_H */
