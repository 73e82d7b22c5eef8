# SPDX-License-Identifier: Apache-2.0
# Debian packages through CPack (`make package`, which configures build/package for /usr):
#   dlock         the command and its man page (component cli); Depends from dpkg-shlibdeps
#   libdlock-dev  headers, libdlock.a, the CMake package and dlock.pc (component dev); Depends
#                 on what its users compile and link against: Asio, hiredis and OpenSSL
# Built from a static libdlock: while the major version is 0 the ABI changes with every minor
# version, so a shared runtime package would only pin its users to one exact build. A shared
# configuration (BUILD_SHARED_LIBS) installs fine with `cmake --install`, but packages nothing.
if(BUILD_SHARED_LIBS)
  return()
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dlock)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "dlock maintainers <maintainers@dlock.invalid>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES TRUE)
# Apache-2.0 (LICENSE); each package carries it as /usr/share/doc/PACKAGE/copyright (DEP-5).
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL cli dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

set(CPACK_DEBIAN_CLI_PACKAGE_NAME dlock)
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_CLI_PACKAGE_SHLIBDEPS ON)
# A description's first line is the package's summary (CPack indents the rest).
set(CPACK_DEBIAN_CLI_DESCRIPTION "distributed flock on Redis
dlock runs a command under a lock or a semaphore permit held on one Redis server or on a
quorum of N independent ones (Redlock), renews it while the command runs, stops the command
when the lock is lost, and passes it a fencing token.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libdlock-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# hiredis before 1.0: the reply reader builds replies in hiredis 0.14's object functions, whose
# table 1.0 changed (resp/reply_reader.cpp), and a static libdlock keeps that layout.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libasio-dev (>= 1:1.22), libhiredis-dev (>= 0.14), libhiredis-dev (<< 1.0), libssl-dev (>= 3)")
set(CPACK_DEBIAN_DEV_DESCRIPTION "C++20 library for distributed locks on Redis (development files)
Locks over one Redis server or N independent ones (Redlock), counting semaphores, fencing
tokens, leases with a watchdog, and WATCH-based optimistic transactions; the lock is a
standard Lockable. This package holds the headers, the static library, and the files for
CMake's find_package(dlock) and for pkg-config.")

include(CPack)
