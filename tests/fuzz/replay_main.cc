// The fuzz targets' regression test in the normal build: every file of the given corpus directories
// goes through the target's LLVMFuzzerTestOneInput (a failed check aborts the test). A missing or
// empty directory fails: a corpus that silently disappeared would make the test pass on nothing.
// --if-present=DIR names a directory that may be absent or empty: the target's crash reproducers
// (tests/fuzz/crashes/<target>/), which exist only once a run has found something.
//   <target>_replay DIR... [--if-present=DIR]...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR... [--if-present=DIR]...\n", argv[0]);
    return 2;
  }
  size_t total = 0;
  constexpr std::string_view kIfPresent = "--if-present=";
  for (int i = 1; i < argc; ++i) {
    std::string_view dir = argv[i];
    const bool optional = dir.starts_with(kIfPresent);
    if (optional) dir.remove_prefix(kIfPresent.size());
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    if (!optional || std::filesystem::exists(dir, ec)) {
      for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    }
    if (ec || (files.empty() && !optional)) {
      std::fprintf(stderr, "%s: no corpus files in %.*s%s%s\n", argv[0], int(dir.size()), dir.data(),
                   ec ? ": " : "", ec ? ec.message().c_str() : "");
      return 1;
    }
    std::sort(files.begin(), files.end());
    for (const auto& path : files) {
      std::ifstream in(path, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "%s: cannot read %s\n", argv[0], path.c_str());
        return 1;
      }
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    }
    std::printf("%.*s: %zu inputs\n", int(dir.size()), dir.data(), files.size());
    total += files.size();
  }
  std::printf("%zu inputs replayed, no failure\n", total);
  return 0;
}
