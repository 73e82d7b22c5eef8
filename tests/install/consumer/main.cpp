// SPDX-License-Identifier: Apache-2.0
// The consumer's executable: links only libconsumer.so (lock_job.cpp), a shared library that
// holds dlock (a static libdlock.a linked into it, or libdlock.so), and runs its job against
// the server that $DLOCK_REDIS names.
#include <cstdlib>
#include <iostream>

#include "lock_job.hpp"

int main() {
  const char* url = std::getenv("DLOCK_REDIS");
  if (url == nullptr) {
    std::cerr << "consumer: DLOCK_REDIS is not set\n";
    return 2;
  }
  return consumer::lock_job(url);
}
