// The fuzz targets' regression test in the normal build: every file of the given corpus directories
// goes through the target's LLVMFuzzerTestOneInput (a failed check aborts the test). A missing or
// empty directory fails: a corpus that silently disappeared would make the test pass on nothing.
//   <target>_replay DIR...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR...\n", argv[0]);
    return 2;
  }
  size_t total = 0;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(argv[i], ec)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    if (ec || files.empty()) {
      std::fprintf(stderr, "%s: no corpus files in %s%s%s\n", argv[0], argv[i], ec ? ": " : "",
                   ec ? ec.message().c_str() : "");
      return 1;
    }
    std::sort(files.begin(), files.end());
    for (const auto& path : files) {
      std::ifstream in(path, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    }
    std::printf("%s: %zu inputs\n", argv[i], files.size());
    total += files.size();
  }
  std::printf("%zu inputs replayed, no failure\n", total);
  return 0;
}
