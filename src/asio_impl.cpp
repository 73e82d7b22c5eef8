// SPDX-License-Identifier: Apache-2.0
// Asio's compiled part, once for the whole build (DLOCK_ASIO_COMPILED_ONCE, CMakeLists.txt):
// with ASIO_SEPARATE_COMPILATION every other translation unit only declares Asio's non-template
// functions instead of compiling them again, which halved the sanitized build's heaviest files.
#include <asio/impl/src.hpp>
#include <asio/ssl/impl/src.hpp>
