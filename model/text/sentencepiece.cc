// Tokenizer over a sentencepiece model, reached through the steady_spm module: Debian's
// libsentencepiece embeds its own protobuf-lite, which crashes a process that also links gRPC's
// (docs/architecture.md, "sentencepiece in its own module").
#include "model/text/sentencepiece.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace steady {

namespace {
// RTLD_DEEPBIND keeps the module's protobuf-lite apart from gRPC's (docs/architecture.md).
// AddressSanitizer cannot run a DEEPBIND library; in its builds (the fuzz targets, docs/fuzzing.md)
// the one program that loads the tokenizer, tokenizer_fuzz, links no gRPC, so it loads the module
// without the flag.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kDeepBind = 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int kDeepBind = 0;
#else
constexpr int kDeepBind = RTLD_DEEPBIND;
#endif
#else
constexpr int kDeepBind = RTLD_DEEPBIND;
#endif
// Function table of the loaded module; loaded once per process.
struct SpmModule {
  void* (*load)(const char*, char*, size_t);
  void (*free_handle)(void*);
  void (*free_buffer)(void*);
  int (*vocab_size)(void*);
  int (*bos_id)(void*);
  int (*eos_id)(void*);
  int32_t* (*encode)(void*, const char*, size_t, size_t*);
  char* (*decode)(void*, const int32_t*, size_t, size_t*);
  int (*piece_id)(void*, const char*);
};

std::vector<std::string> ModuleCandidates() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("STEADY_SPM_MODULE")) paths.push_back(env);
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    paths.push_back((std::filesystem::path(exe).parent_path().parent_path() / "lib" / "libsteady_spm.so").string());
  }
#ifdef STEADY_SPM_MODULE_BUILD_PATH
  paths.push_back(STEADY_SPM_MODULE_BUILD_PATH);
#endif
  return paths;
}

template <typename F>
bool Resolve(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}


// A sentencepiece model behind the module's C ABI.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const SpmModule* module, void* handle)
      : module_(module), handle_(handle), vocab_size_(module->vocab_size(handle)), bos_id_(module->bos_id(handle)),
        eos_id_(module->eos_id(handle)) {}
  ~SentencePieceTokenizer() override { module_->free_handle(handle_); }

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const override;
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids, const DecodeOptions& options) const override;
  int vocab_size() const override { return vocab_size_; }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  bool prepends_bos() const override { return true; }
  int TokenId(std::string_view token) const override { return module_->piece_id(handle_, std::string(token).c_str()); }

 private:
  const SpmModule* const module_;
  void* const handle_;
  const int vocab_size_, bos_id_, eos_id_;
};

absl::StatusOr<const SpmModule*> LoadModule() {
  static std::mutex mu;
  static SpmModule* module = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (module) return module;
  std::string tried;
  for (const std::string& path : ModuleCandidates()) {
    if (!std::filesystem::exists(path)) {
      absl::StrAppend(&tried, " ", path, " (absent)");
      continue;
    }
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | kDeepBind);
    if (!lib) {
      absl::StrAppend(&tried, " ", path, " (", dlerror(), ")");
      continue;
    }
    auto* m = new SpmModule();
    if (Resolve(lib, "steady_spm_load", &m->load) && Resolve(lib, "steady_spm_free", &m->free_handle) &&
        Resolve(lib, "steady_spm_free_buffer", &m->free_buffer) &&
        Resolve(lib, "steady_spm_vocab_size", &m->vocab_size) && Resolve(lib, "steady_spm_bos_id", &m->bos_id) &&
        Resolve(lib, "steady_spm_eos_id", &m->eos_id) && Resolve(lib, "steady_spm_encode", &m->encode) &&
        Resolve(lib, "steady_spm_decode", &m->decode) && Resolve(lib, "steady_spm_piece_id", &m->piece_id)) {
      module = m;
      return module;
    }
    delete m;
    absl::StrAppend(&tried, " ", path, " (missing symbols)");
  }
  return absl::FailedPreconditionError(absl::StrCat("cannot load the sentencepiece module libsteady_spm.so; tried:", tried));
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text, bool) const {
  size_t n = 0;
  int32_t* ids = module_->encode(handle_, text.data(), text.size(), &n);
  if (!ids) return absl::InvalidArgumentError("tokenizer: cannot encode the text");
  std::vector<int32_t> out(ids, ids + n);
  module_->free_buffer(ids);
  return out;
}

absl::StatusOr<std::string> SentencePieceTokenizer::Decode(const std::vector<int32_t>& ids, const DecodeOptions&) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: token id ", id, " is outside the vocabulary [0, ", vocab_size_, ")"));
    }
  }
  size_t len = 0;
  char* text = module_->decode(handle_, ids.data(), ids.size(), &len);
  if (!text) return absl::InvalidArgumentError("tokenizer: cannot decode the ids");
  std::string out(text, len);
  module_->free_buffer(text);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& model_path) {
  auto module = LoadModule();
  if (!module.ok()) return module.status();
  if (!std::filesystem::is_regular_file(model_path)) {
    return absl::NotFoundError(absl::StrCat(model_path, ": tokenizer model not found"));
  }
  char err[512] = {0};
  void* handle = (*module)->load(model_path.c_str(), err, sizeof(err));
  if (!handle) return absl::InvalidArgumentError(absl::StrCat(model_path, ": not a sentencepiece model: ", err));
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(*module, handle));
}

}  // namespace steady
