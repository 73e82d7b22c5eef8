// SPDX-License-Identifier: Apache-2.0
// replay_main: runs a fuzz target over files, without libFuzzer, so that its seed corpus and
// the inputs that once crashed it (fuzz/regressions/<target>/) replay as ordinary tests with
// any compiler.
//   <target>_replay FILE|DIR...   every file given, and every file in each directory
// Exits 0 when every input ran; a crash or a sanitizer report fails the test.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

void replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path p = argv[i];
    if (std::filesystem::is_directory(p)) {
      for (const auto& entry : std::filesystem::directory_iterator(p)) {
        if (!entry.is_regular_file() || entry.path().filename().string().front() == '.') continue;
        replay(entry.path());
        ++count;
      }
    } else if (std::filesystem::exists(p)) {
      replay(p);
      ++count;
    }
  }
  std::printf("replayed %zu inputs\n", count);
  return 0;
}
