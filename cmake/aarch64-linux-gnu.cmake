# Cross-compiling lenet's C++ library for 64-bit ARM Linux (aarch64) on an x86-64 Debian or
# Ubuntu machine, with the distribution's cross toolchain and its arm64 libraries
# (docs/install.md, "ARM64"):
#
#   sudo apt-get install g++-aarch64-linux-gnu qemu-user
#   sudo dpkg --add-architecture arm64 && sudo apt-get update
#   sudo apt-get install libopenblas-dev:arm64 libpng-dev:arm64 libstdc++6:arm64
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#   cmake --build build-arm64 && cmake --install build-arm64 --prefix /opt/lenet-arm64
#
# Programs built this way run on this machine under qemu-aarch64 (CMake's emulator below),
# on the multiarch arm64 runtime (/lib/ld-linux-aarch64.so.1, /usr/lib/aarch64-linux-gnu):
# `qemu-aarch64 ./program`, without -L /usr/aarch64-linux-gnu, under which a dynamically
# linked program hung in its first pthread_create (Debian 12's qemu 7.2).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# The target's files: the cross toolchain's own tree, then the multiarch folders of the
# machine (/usr/lib/aarch64-linux-gnu, /usr/include/aarch64-linux-gnu), never x86-64's.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_IGNORE_PATH /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/include/x86_64-linux-gnu)

find_program(_lenet_qemu_aarch64 qemu-aarch64)
if(_lenet_qemu_aarch64)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${_lenet_qemu_aarch64}")
endif()
