# Cross toolchain for aarch64 Linux (Debian: gcc-aarch64-linux-gnu), used by .ci/run to prove the
# CPU plugin, NEON build included, compiles for aarch64 (and, under qemu-user, runs its tests):
#   cmake -S . -B build/aarch64 --toolchain cmake/aarch64-linux-gnu.cmake -DFA_WERROR=ON ...
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Libraries and headers from the cross sysroot only; programs from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Test programs run under qemu-user when it is installed (Debian: qemu-user), with the sysroot.
find_program(FA_QEMU_AARCH64 qemu-aarch64)
if(FA_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${FA_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()
