// SPDX-License-Identifier: Apache-2.0
// Takes a lock with fencing token on the server that $DLOCK_REDIS names, through nothing but
// the installed headers and library; exits 0 when it held and released it.
#include <dlock/dlock.hpp>

#include <cstdlib>
#include <iostream>

int main() {
  const char* url = std::getenv("DLOCK_REDIS");
  if (url == nullptr) {
    std::cerr << "consumer: DLOCK_REDIS is not set\n";
    return 2;
  }
  try {
    dlock::client node{url};
    dlock::mutex lock{node, "consumer:job"};
    // The error_code form, error_code last: the installed headers' API as users call it.
    std::error_code ec;
    dlock::node_results votes;
    dlock::lease held = lock.acquire(&votes, ec);
    if (!held || held.fencing_token() == 0) {
      std::cerr << "consumer: not acquired: " << ec.message() << "\n";
      for (const auto& v : votes) std::cerr << "  " << v.node << ": " << to_string(v) << "\n";
      return 1;
    }
    std::cout << "consumer: held " << held.key() << " with fencing token " << held.fencing_token()
              << "\n";
    if (auto ec = held.release()) {
      std::cerr << "consumer: release failed: " << ec.message() << "\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
}
