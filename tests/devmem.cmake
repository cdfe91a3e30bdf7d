# fa_devmem: tools/device_mem.c (with its CUDA and OpenCL parts) as a static library, for the
# conformance suite, the GPU smoke test and fa-bench (included from tests/ and bench/; whichever
# comes first defines it).
# With the CUDA backend built (FA_BACKEND_CUDA, decided in cmake/backends.cmake) it reaches CUDA
# memory through the CUDA runtime, linked statically; without it, asking for CUDA memory returns
# "this build has no CUDA support (FA_BACKEND_CUDA off)".
# With OpenCL found (find_package(OpenCL) in cmake/backends.cmake: headers and the ICD loader; the
# same condition the OpenCL plugin needs, FA_BACKEND_OPENCL implies it) it reaches OpenCL buffers
# through OpenCL::OpenCL (API 1.2); without it, asking for OpenCL memory returns "this build has no
# OpenCL support (OpenCL not found at configure time)".
if(TARGET fa_devmem)
  return()
endif()
add_library(fa_devmem STATIC ${PROJECT_SOURCE_DIR}/tools/device_mem.c
  ${PROJECT_SOURCE_DIR}/tools/device_mem_cuda.c ${PROJECT_SOURCE_DIR}/tools/device_mem_opencl.c)
target_include_directories(fa_devmem PUBLIC ${PROJECT_SOURCE_DIR}/tools)
target_link_libraries(fa_devmem PUBLIC flashattn)
target_compile_options(fa_devmem PRIVATE ${FA_WARNINGS})
if(FA_BACKEND_CUDA)
  # The toolkit of the nvcc that check_language(CUDA) found, unless the caller named one.
  if(NOT CUDAToolkit_ROOT AND CMAKE_CUDA_COMPILER)
    get_filename_component(fa_nvcc_bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
    get_filename_component(CUDAToolkit_ROOT "${fa_nvcc_bin}" DIRECTORY)
  endif()
  find_package(CUDAToolkit REQUIRED)
  target_link_libraries(fa_devmem PUBLIC CUDA::cudart_static)
  target_compile_definitions(fa_devmem PRIVATE FA_DEVMEM_CUDA=1)
  message(STATUS "fa_devmem: CUDA memory through CUDA::cudart_static (${CUDAToolkit_VERSION})")
else()
  message(STATUS "fa_devmem: no CUDA memory (FA_BACKEND_CUDA off)")
endif()
if(NOT DEFINED OpenCL_FOUND)
  find_package(OpenCL QUIET)
endif()
if(OpenCL_FOUND)
  find_package(Threads REQUIRED)
  target_link_libraries(fa_devmem PUBLIC OpenCL::OpenCL PRIVATE Threads::Threads)
  target_compile_definitions(fa_devmem PRIVATE FA_DEVMEM_OPENCL=1 CL_TARGET_OPENCL_VERSION=120)
  message(STATUS "fa_devmem: OpenCL memory through OpenCL::OpenCL (${OpenCL_LIBRARY})")
else()
  message(STATUS "fa_devmem: no OpenCL memory (OpenCL not found)")
endif()
