# The backends, in one list. Each NAME has an option FA_BACKEND_<NAME> (ON by default, turned off
# here when its toolchain is missing), a directory backends/<name> with a plugin target fa_<name>
# (libfa_<name>.so), and FA_<NAME>_REASON: "" when it is built, else why not. The reasons are
# compiled into the core library (core/build_config.h) so fa_backend_info() can report
# "not built: <reason>".
set(FA_BACKENDS CPU CUDA HIP OPENCL)

# CPU: needs OpenMP.
find_package(OpenMP COMPONENTS C)
option(FA_BACKEND_CPU "Build the CPU (OpenMP) backend" ON)
set(FA_CPU_REASON "")
if(NOT FA_BACKEND_CPU)
  set(FA_CPU_REASON "not built: disabled at configure time (FA_BACKEND_CPU=OFF)")
elseif(NOT OpenMP_C_FOUND)
  set(FA_CPU_REASON "not built: no OpenMP for the C compiler at configure time")
endif()

# CUDA: built when nvcc is found (it compiles with no GPU present).
include(CheckLanguage)
check_language(CUDA)
option(FA_BACKEND_CUDA "Build the CUDA backend" ON)
set(FA_CUDA_REASON "")
if(NOT FA_BACKEND_CUDA)
  set(FA_CUDA_REASON "not built: disabled at configure time (FA_BACKEND_CUDA=OFF)")
elseif(NOT CMAKE_CUDA_COMPILER)
  set(FA_CUDA_REASON "not built: no CUDA compiler (nvcc) found at configure time")
endif()

# HIP: hipcc, and the HIP headers for the target (a cross build, e.g. .ci/run's aarch64 one, finds
# hipcc on the host but no headers in its sysroot).
option(FA_BACKEND_HIP "Build the HIP backend" ON)
set(FA_HIP_REASON "")
if(NOT FA_BACKEND_HIP)
  set(FA_HIP_REASON "not built: disabled at configure time (FA_BACKEND_HIP=OFF)")
else()
  find_program(FA_HIPCC hipcc)
  find_path(FA_HIP_INCLUDE hip/hip_runtime_api.h PATHS /opt/rocm/include)
  if(NOT FA_HIPCC)
    set(FA_HIP_REASON "not built: no HIP compiler (hipcc) found at configure time")
  elseif(NOT FA_HIP_INCLUDE)
    set(FA_HIP_REASON "not built: hipcc found but not hip/hip_runtime_api.h for this target "
      "(Debian: libamdhip64-dev)")
  endif()
endif()

# OpenCL: headers and ICD loader (Debian: ocl-icd-opencl-dev, opencl-headers).
find_package(OpenCL QUIET)
option(FA_BACKEND_OPENCL "Build the OpenCL backend" ON)
set(FA_OPENCL_REASON "")
if(NOT FA_BACKEND_OPENCL)
  set(FA_OPENCL_REASON "not built: disabled at configure time (FA_BACKEND_OPENCL=OFF)")
elseif(NOT OpenCL_FOUND)
  set(FA_OPENCL_REASON "not built: no OpenCL headers and ICD loader found at configure time")
endif()

# A backend with a reason is off; the reasons become core/build_config.h's FA_BUILD_REASON_<NAME>.
set(FA_BUILD_REASONS "")
foreach(b ${FA_BACKENDS})
  if(FA_${b}_REASON)
    set(FA_BACKEND_${b} OFF)
    message(STATUS "flashattn backend ${b}: ${FA_${b}_REASON}")
  else()
    message(STATUS "flashattn backend ${b}: built")
  endif()
  string(REPLACE "\\" "\\\\" reason "${FA_${b}_REASON}")
  string(REPLACE "\"" "\\\"" reason "${reason}")
  string(APPEND FA_BUILD_REASONS "#define FA_BUILD_REASON_${b} \"${reason}\"\n")
endforeach()
