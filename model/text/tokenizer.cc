#include "model/text/tokenizer.h"

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
}  // namespace

// Function table of the loaded module; loaded once per process.
struct Tokenizer::Module {
  void* (*load)(const char*, char*, size_t);
  void (*free_handle)(void*);
  void (*free_buffer)(void*);
  int (*vocab_size)(void*);
  int (*bos_id)(void*);
  int (*eos_id)(void*);
  int32_t* (*encode)(void*, const char*, size_t, size_t*);
  char* (*decode)(void*, const int32_t*, size_t, size_t*);
};

namespace {

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


}  // namespace

namespace {

template <typename F>
bool Resolve(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

absl::StatusOr<const Tokenizer::Module*> LoadModule() {
  static std::mutex mu;
  static Tokenizer::Module* module = nullptr;
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
    auto* m = new Tokenizer::Module();
    if (Resolve(lib, "steady_spm_load", &m->load) && Resolve(lib, "steady_spm_free", &m->free_handle) &&
        Resolve(lib, "steady_spm_free_buffer", &m->free_buffer) &&
        Resolve(lib, "steady_spm_vocab_size", &m->vocab_size) && Resolve(lib, "steady_spm_bos_id", &m->bos_id) &&
        Resolve(lib, "steady_spm_eos_id", &m->eos_id) && Resolve(lib, "steady_spm_encode", &m->encode) &&
        Resolve(lib, "steady_spm_decode", &m->decode)) {
      module = m;
      return module;
    }
    delete m;
    absl::StrAppend(&tried, " ", path, " (missing symbols)");
  }
  return absl::FailedPreconditionError(absl::StrCat("cannot load the sentencepiece module libsteady_spm.so; tried:", tried));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& model_path) {
  auto module = LoadModule();
  if (!module.ok()) return module.status();
  if (!std::filesystem::is_regular_file(model_path)) {
    return absl::NotFoundError(absl::StrCat(model_path, ": tokenizer model not found"));
  }
  char err[512] = {0};
  void* handle = (*module)->load(model_path.c_str(), err, sizeof(err));
  if (!handle) return absl::InvalidArgumentError(absl::StrCat(model_path, ": not a sentencepiece model: ", err));
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->module_ = *module;
  t->handle_ = handle;
  t->vocab_size_ = t->module_->vocab_size(handle);
  t->bos_id_ = t->module_->bos_id(handle);
  t->eos_id_ = t->module_->eos_id(handle);
  return t;
}

Tokenizer::~Tokenizer() {
  if (handle_) module_->free_handle(handle_);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(const std::string& text) const {
  size_t n = 0;
  int32_t* ids = module_->encode(handle_, text.data(), text.size(), &n);
  if (!ids) return absl::InvalidArgumentError("tokenizer: cannot encode the text");
  std::vector<int32_t> out(ids, ids + n);
  module_->free_buffer(ids);
  return out;
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids) const {
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

namespace {

// True when `s` ends inside a UTF-8 sequence (or with the replacement character sentencepiece
// emits for byte pieces that do not yet form a character).
bool EndsIncomplete(const std::string& s) {
  if (s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0) return true;
  for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
    const unsigned char c = s[s.size() - back];
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = (c & 0x80) == 0 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    return need > back;
  }
  return false;
}

}  // namespace

TextStreamer::TextStreamer(const Tokenizer& tokenizer, Mode mode) : tokenizer_(tokenizer) {
  if (mode != Mode::kContinuation) return;
  // A piece that is a word of its own: its decoded text ends where the continuation's begins.
  auto ids = tokenizer.Encode("a");
  if (!ids.ok() || ids->size() != 1) return;
  auto text = tokenizer.Decode(*ids);
  if (!text.ok() || text->empty()) return;
  sentinel_ = *std::move(ids);
  sentinel_text_ = *std::move(text);
}

absl::StatusOr<std::string> TextStreamer::DecodeWindow(size_t begin, size_t end) const {
  std::vector<int32_t> window(sentinel_);
  window.insert(window.end(), ids_.begin() + begin, ids_.begin() + end);
  auto text = tokenizer_.Decode(window);
  if (!text.ok() || sentinel_.empty()) return text;
  // The sentinel decodes to the same text in front of anything (pieces only append).
  if (text->compare(0, sentinel_text_.size(), sentinel_text_) != 0) {
    return absl::InternalError("tokenizer: the stream's sentinel piece did not decode as a prefix");
  }
  return text->substr(sentinel_text_.size());
}

absl::StatusOr<std::string> TextStreamer::Add(int32_t id) {
  ids_.push_back(id);
  auto before = DecodeWindow(prefix_, read_);
  if (!before.ok()) return before.status();
  auto after = DecodeWindow(prefix_, ids_.size());
  if (!after.ok()) return after.status();
  if (after->size() <= before->size() || EndsIncomplete(*after)) return std::string();
  std::string delta = after->substr(before->size());
  prefix_ = read_;
  read_ = ids_.size();
  return delta;
}

absl::StatusOr<std::string> TextStreamer::Flush() {
  auto before = DecodeWindow(prefix_, read_);
  if (!before.ok()) return before.status();
  auto after = DecodeWindow(prefix_, ids_.size());
  if (!after.ok()) return after.status();
  read_ = prefix_ = ids_.size();
  return after->size() > before->size() ? after->substr(before->size()) : std::string();
}

}  // namespace steady
