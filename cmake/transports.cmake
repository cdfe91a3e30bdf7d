# The ring's transport plugins (transports/<name>, libfa_<name>.so), loaded by core/transports.c at
# run time so that libflashattn.so links no communication library. FA_<NAME>_REASON is "" when the
# plugin is built, else why not; core/build_config.h carries it for fa_transport_info().

# MPI: the C bindings of the MPI the application uses. MPI_Comm is a different type in each MPI
# implementation (an int in MPICH, a pointer in Open MPI), so libfa_mpi.so works only with the MPI
# it was compiled against: configure with that MPI's compiler wrappers or MPI_HOME when several are
# installed.
option(FA_TRANSPORT_MPI "Build the MPI transport plugin of the ring calls" ON)
if(FA_TRANSPORT_MPI)
  find_package(MPI COMPONENTS C QUIET)
endif()
set(FA_MPI_REASON "")
if(NOT FA_TRANSPORT_MPI)
  set(FA_MPI_REASON "not built: disabled at configure time (FA_TRANSPORT_MPI=OFF)")
elseif(NOT MPI_C_FOUND)
  set(FA_MPI_REASON "not built: no MPI C library found at configure time (Debian: libopenmpi-dev or libmpich-dev)")
endif()
if(FA_MPI_REASON)
  message(STATUS "flashattn transport MPI: ${FA_MPI_REASON}")
else()
  message(STATUS "flashattn transport MPI: built (MPI ${MPI_C_VERSION})")
endif()

# NCCL: the ring over CUDA device memory (transports/nccl). Needs nccl.h and libnccl and the CUDA
# runtime (find_package(CUDAToolkit)); the plugin is plain C, so no CUDA compiler is needed and it
# is built with or without the CUDA backend. NCCL is looked for under NCCL_HOME (a CMake or an
# environment variable) first, then beside the CUDA toolkit, then in the system's paths.
option(FA_TRANSPORT_NCCL "Build the NCCL transport plugin of the ring calls" ON)
if(FA_TRANSPORT_NCCL)
  # The toolkit of the nvcc that check_language(CUDA) found (cmake/backends.cmake), as the CUDA
  # backend uses, unless the caller named one.
  if(NOT CUDAToolkit_ROOT AND CMAKE_CUDA_COMPILER)
    get_filename_component(fa_nvcc_bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
    get_filename_component(CUDAToolkit_ROOT "${fa_nvcc_bin}" DIRECTORY)
  endif()
  find_package(CUDAToolkit QUIET)
  set(fa_nccl_hints ${NCCL_HOME} $ENV{NCCL_HOME} ${CUDAToolkit_INCLUDE_DIRS}
    ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
  find_path(FA_NCCL_INCLUDE_DIR nccl.h HINTS ${fa_nccl_hints} PATH_SUFFIXES include)
  find_library(FA_NCCL_LIBRARY nccl HINTS ${fa_nccl_hints} /usr/local/cuda/lib
    PATH_SUFFIXES lib lib64)
  mark_as_advanced(FA_NCCL_INCLUDE_DIR FA_NCCL_LIBRARY)
endif()
set(FA_NCCL_REASON "")
if(NOT FA_TRANSPORT_NCCL)
  set(FA_NCCL_REASON "not built: disabled at configure time (FA_TRANSPORT_NCCL=OFF)")
elseif(NOT CUDAToolkit_FOUND)
  set(FA_NCCL_REASON "not built: no CUDA toolkit found at configure time (the CUDA runtime's headers and library; CUDAToolkit_ROOT)")
elseif(NOT EXISTS "${FA_NCCL_INCLUDE_DIR}/nccl.h" OR NOT EXISTS "${FA_NCCL_LIBRARY}")
  set(FA_NCCL_REASON "not built: no NCCL found at configure time (nccl.h and libnccl.so; NCCL_HOME, or the CUDA toolkit's)")
endif()
if(FA_NCCL_REASON)
  message(STATUS "flashattn transport NCCL: ${FA_NCCL_REASON}")
else()
  file(STRINGS ${FA_NCCL_INCLUDE_DIR}/nccl.h fa_nccl_version REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE "[^0-9;]*([0-9]+)" "\\1." fa_nccl_version "${fa_nccl_version}")
  string(REPLACE ";" "" fa_nccl_version "${fa_nccl_version}")
  string(REGEX REPLACE "\\.$" "" fa_nccl_version "${fa_nccl_version}")
  message(STATUS "flashattn transport NCCL: built (NCCL ${fa_nccl_version}, ${FA_NCCL_LIBRARY}; "
    "CUDA ${CUDAToolkit_VERSION})")
endif()
