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
