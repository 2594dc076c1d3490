# Cross-compiles for 64-bit ARM Linux with Debian's toolchain (gcc-aarch64-linux-gnu,
# libc6-dev-arm64-cross, and arm64 multiarch -dev packages such as libprotobuf-c-dev:arm64).
# Usage: cmake -DCMAKE_TOOLCHAIN_FILE=deploy/aarch64-toolchain.cmake ...
# Programs it builds run on x86-64 under
#   qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib PROGRAM
# (without LD_LIBRARY_PATH the cross ld.so may load libc6:arm64's libc.so.6, another glibc
# build, and hang in pthread_create).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# Headers and libraries come from the cross C library and from arm64 multiarch packages
# (/usr/lib/aarch64-linux-gnu, reached through the root "/"); programs from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu
    -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib)
