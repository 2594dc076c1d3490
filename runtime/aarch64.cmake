# The aarch64 cross build of this folder alone, as an ExternalProject of kiln's build, with the
# runtime smoke test cross-built beside it. Sets, in the parent scope:
#   KILN_AARCH64             ON when the cross build and qemu are available
#   KILN_RUNTIME_AARCH64_DIR the cross build's folder: libkiln_runtime.a, runtime_smoke and
#                            run_model (examples/c/run_model.c, which runs a compiled model)
#   KILN_AARCH64_SYSROOT     the aarch64 C library the cross compiler links against
#   KILN_AARCH64_RUN         the command that runs a cross-built program under qemu: put it
#                            before the program (and its arguments) in add_test
option(KILN_AARCH64 "Cross-build the runtime for aarch64 and test it under qemu" ON)
set(KILN_AARCH64_SYSROOT /usr/aarch64-linux-gnu)
find_program(KILN_AARCH64_GCC aarch64-linux-gnu-gcc)
find_program(KILN_QEMU_AARCH64 qemu-aarch64)

set(kiln_aarch64_missing "")
if(NOT KILN_AARCH64_GCC)
  list(APPEND kiln_aarch64_missing aarch64-linux-gnu-gcc)
endif()
if(NOT EXISTS ${KILN_AARCH64_SYSROOT}/include/stdio.h)
  list(APPEND kiln_aarch64_missing "the aarch64 C library in ${KILN_AARCH64_SYSROOT}")
endif()
if(NOT KILN_QEMU_AARCH64)
  list(APPEND kiln_aarch64_missing qemu-aarch64)
endif()

if(NOT KILN_AARCH64)
  message(STATUS "kiln: aarch64 cross build of runtime/ off (KILN_AARCH64=OFF)")
elseif(kiln_aarch64_missing)
  list(JOIN kiln_aarch64_missing ", " missing)
  message(STATUS "kiln: aarch64 cross build of runtime/ skipped: ${missing} not found "
                 "(deploy/install-deps.sh installs them)")
  set(KILN_AARCH64 OFF)
else()
  include(ExternalProject)
  set(KILN_RUNTIME_AARCH64_DIR ${CMAKE_CURRENT_BINARY_DIR}/aarch64)
  ExternalProject_Add(kiln_runtime_aarch64
    SOURCE_DIR ${CMAKE_CURRENT_SOURCE_DIR}
    BINARY_DIR ${KILN_RUNTIME_AARCH64_DIR}
    PREFIX ${CMAKE_CURRENT_BINARY_DIR}/aarch64-project
    CMAKE_ARGS
      -DCMAKE_TOOLCHAIN_FILE=${PROJECT_SOURCE_DIR}/deploy/aarch64-toolchain.cmake
      -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
      -DKILN_WERROR=${KILN_WERROR}
      -DKILN_RUNTIME_PROGRAMS=${PROJECT_SOURCE_DIR}/tests/runtime/runtime_smoke.c|${PROJECT_SOURCE_DIR}/examples/c/run_model.c
    LIST_SEPARATOR |
    # The outer build cannot see the runtime's sources: let the inner one decide what changed.
    BUILD_ALWAYS ON
    INSTALL_COMMAND ""
    BUILD_BYPRODUCTS
      ${KILN_RUNTIME_AARCH64_DIR}/libkiln_runtime.a
      ${KILN_RUNTIME_AARCH64_DIR}/runtime_smoke
      ${KILN_RUNTIME_AARCH64_DIR}/run_model)
  message(STATUS "kiln: aarch64 runtime cross-built in ${KILN_RUNTIME_AARCH64_DIR}")
endif()

# qemu-aarch64 -L alone is not enough on Debian once any arm64 multiarch package is installed
# (libprotobuf-c-dev:arm64 brings libc6:arm64): the cross ld.so takes the cache's
# /lib/aarch64-linux-gnu/libc.so.6, a different glibc build than its own, and the mismatch hangs
# the first pthread_create. LD_LIBRARY_PATH makes it load the cross libc that matches it.
set(KILN_AARCH64_RUN ${KILN_QEMU_AARCH64} -L ${KILN_AARCH64_SYSROOT}
                     -E LD_LIBRARY_PATH=${KILN_AARCH64_SYSROOT}/lib)

set(KILN_AARCH64 ${KILN_AARCH64} PARENT_SCOPE)
set(KILN_AARCH64_RUN ${KILN_AARCH64_RUN} PARENT_SCOPE)
set(KILN_RUNTIME_AARCH64_DIR ${KILN_RUNTIME_AARCH64_DIR} PARENT_SCOPE)
set(KILN_AARCH64_SYSROOT ${KILN_AARCH64_SYSROOT} PARENT_SCOPE)
