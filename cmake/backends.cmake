# Decides, per backend, whether it is built, and records why not. The reasons are compiled into the
# core library (core/build_config.h) so fa_backend_info() can report "not built: <reason>".

# CPU: needs OpenMP.
find_package(OpenMP COMPONENTS C)
option(FA_BACKEND_CPU "Build the CPU (OpenMP) backend" ON)
set(FA_CPU_REASON "")
if(FA_BACKEND_CPU AND NOT OpenMP_C_FOUND)
  set(FA_BACKEND_CPU OFF)
  set(FA_CPU_REASON "not built: no OpenMP for the C compiler at configure time")
elseif(NOT FA_BACKEND_CPU)
  set(FA_CPU_REASON "not built: disabled at configure time (FA_BACKEND_CPU=OFF)")
endif()

# CUDA: built when nvcc is found (it compiles with no GPU present); -DFA_BACKEND_CUDA=OFF skips it.
include(CheckLanguage)
check_language(CUDA)
option(FA_BACKEND_CUDA "Build the CUDA backend" ON)
if(NOT FA_BACKEND_CUDA)
  set(FA_CUDA_REASON "not built: disabled at configure time (FA_BACKEND_CUDA=OFF)")
elseif(NOT CMAKE_CUDA_COMPILER)
  set(FA_CUDA_REASON "not built: no CUDA compiler (nvcc) found at configure time")
  set(FA_BACKEND_CUDA OFF)
else()
  set(FA_CUDA_REASON "")
endif()

# HIP: hipcc.
find_program(FA_HIPCC hipcc)
if(NOT FA_HIPCC)
  set(FA_HIP_REASON "not built: no HIP compiler (hipcc) found at configure time")
elseif(NOT EXISTS ${CMAKE_SOURCE_DIR}/backends/hip/CMakeLists.txt)
  set(FA_HIP_REASON "not built: this version has no HIP backend yet (hipcc found: ${FA_HIPCC})")
else()
  set(FA_HIP_REASON "")
endif()

# OpenCL: headers and ICD loader (Debian: ocl-icd-opencl-dev, opencl-headers).
find_package(OpenCL QUIET)
option(FA_BACKEND_OPENCL "Build the OpenCL backend" ON)
if(NOT FA_BACKEND_OPENCL)
  set(FA_OPENCL_REASON "not built: disabled at configure time (FA_BACKEND_OPENCL=OFF)")
elseif(NOT OpenCL_FOUND)
  set(FA_OPENCL_REASON "not built: no OpenCL headers and ICD loader found at configure time")
  set(FA_BACKEND_OPENCL OFF)
else()
  set(FA_OPENCL_REASON "")
endif()

foreach(b CPU CUDA HIP OPENCL)
  message(STATUS "flashattn backend ${b}: ${FA_${b}_REASON}")
endforeach()
