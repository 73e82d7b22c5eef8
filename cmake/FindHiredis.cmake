# SPDX-License-Identifier: Apache-2.0
# Debian's libhiredis-dev ships a config without targets, and a pkg-config file.
# This turns either into the imported target hiredis::hiredis.
if(TARGET hiredis::hiredis)
  set(Hiredis_FOUND TRUE)
  return()
endif()
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_HIREDIS QUIET hiredis)
endif()
find_path(Hiredis_INCLUDE_DIR hiredis/hiredis.h HINTS ${PC_HIREDIS_INCLUDE_DIRS})
find_library(Hiredis_LIBRARY NAMES hiredis HINTS ${PC_HIREDIS_LIBRARY_DIRS})
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Hiredis REQUIRED_VARS Hiredis_LIBRARY Hiredis_INCLUDE_DIR)
if(Hiredis_FOUND)
  add_library(hiredis::hiredis UNKNOWN IMPORTED)
  set_target_properties(hiredis::hiredis PROPERTIES
    IMPORTED_LOCATION ${Hiredis_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${Hiredis_INCLUDE_DIR})
endif()
