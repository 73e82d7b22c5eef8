// SPDX-License-Identifier: Apache-2.0
#include "token.hpp"

#include <openssl/rand.h>
#include <unistd.h>

#include <array>
#include <stdexcept>

#include "dlock/detail/async.hpp"
#include "net/runtime.hpp"

namespace dlock::detail {
namespace {

// RAND_bytes costs about 7k instructions a call, mostly locking and reseed checks, which was
// 12 % of a whole lock+unlock cycle. Drawing 4 KiB at a time and handing out 16 bytes per token
// keeps the CSPRNG's output and spends that once per 256 tokens. The buffer is per thread, and
// dropped in a forked child (pid check), which must not hand out its parent's next tokens.
class token_source {
 public:
  const unsigned char* next16() {
    pid_t pid = ::getpid();
    if (used_ + 16 > bytes_.size() || pid != pid_) refill(pid);
    const unsigned char* out = bytes_.data() + used_;
    used_ += 16;
    return out;
  }

 private:
  void refill(pid_t pid) {
    if (on_io_thread()) free_io_thread_openssl_state_at_exit();  // RAND_bytes' per-thread state
    if (RAND_bytes(bytes_.data(), static_cast<int>(bytes_.size())) != 1) {
      throw std::runtime_error("dlock: the CSPRNG failed to produce a token");
    }
    used_ = 0;
    pid_ = pid;
  }

  std::array<unsigned char, 4096> bytes_{};
  std::size_t used_ = sizeof(bytes_);
  pid_t pid_ = 0;
};

}  // namespace

std::string random_token() {
  thread_local token_source source;
  const unsigned char* bytes = source.next16();
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (std::size_t i = 0; i < 16; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 0xf];
  }
  return out;
}

}  // namespace dlock::detail
