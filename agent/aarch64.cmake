# The static aarch64 build of kiln-agent for boards, as an ExternalProject of kiln's build
# (configured with deploy/aarch64-toolchain.cmake, linked with -static against the arm64
# protobuf-c from libprotobuf-c-dev:arm64). Sets KILN_AGENT_AARCH64 (the binary's path, or "" when
# the cross build is off: runtime/aarch64.cmake says why).
set(KILN_AGENT_AARCH64 "")
if(KILN_AARCH64 AND EXISTS /usr/lib/aarch64-linux-gnu/libprotobuf-c.a)
  include(ExternalProject)
  set(agent_aarch64_dir ${CMAKE_CURRENT_BINARY_DIR}/aarch64)
  ExternalProject_Add(kiln_agent_aarch64
    SOURCE_DIR ${CMAKE_CURRENT_SOURCE_DIR}
    BINARY_DIR ${agent_aarch64_dir}
    PREFIX ${CMAKE_CURRENT_BINARY_DIR}/aarch64-project
    CMAKE_ARGS
      -DCMAKE_TOOLCHAIN_FILE=${PROJECT_SOURCE_DIR}/deploy/aarch64-toolchain.cmake
      -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
      -DKILN_WERROR=${KILN_WERROR}
      -DKILN_AGENT_STATIC=ON
    BUILD_ALWAYS ON
    INSTALL_COMMAND ""
    BUILD_BYPRODUCTS ${agent_aarch64_dir}/kiln-agent)
  set(KILN_AGENT_AARCH64 ${agent_aarch64_dir}/kiln-agent)
  message(STATUS "kiln: kiln-agent cross-built for aarch64, static, in ${agent_aarch64_dir}")
elseif(KILN_AARCH64)
  message(STATUS "kiln: static aarch64 kiln-agent skipped: no /usr/lib/aarch64-linux-gnu/"
                 "libprotobuf-c.a (deploy/install-deps.sh installs libprotobuf-c-dev:arm64)")
endif()
set(KILN_AGENT_AARCH64 ${KILN_AGENT_AARCH64} PARENT_SCOPE)
