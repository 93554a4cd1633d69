// The only file that links sentencepiece. Built as a MODULE and loaded with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND) by model/text/tokenizer.cc: Debian's libsentencepiece embeds and
// exports its own protobuf-lite, which crashes a process that also links gRPC's libprotobuf.
// A C ABI with malloc'ed buffers keeps C++ types from crossing the boundary.
#include <sentencepiece_processor.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void CopyError(const std::string& msg, char* err, size_t errlen) {
  if (errlen == 0) return;
  std::strncpy(err, msg.c_str(), errlen - 1);
  err[errlen - 1] = '\0';
}

}  // namespace

extern "C" {

int steady_spm_abi_version() { return 1; }

void* steady_spm_load(const char* path, char* err, size_t errlen) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  const auto status = sp->Load(path);
  if (!status.ok()) {
    CopyError(status.ToString(), err, errlen);
    delete sp;
    return nullptr;
  }
  return sp;
}

void steady_spm_free(void* handle) { delete static_cast<sentencepiece::SentencePieceProcessor*>(handle); }
void steady_spm_free_buffer(void* buffer) { std::free(buffer); }

int steady_spm_vocab_size(void* handle) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->GetPieceSize();
}
int steady_spm_bos_id(void* handle) { return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->bos_id(); }
int steady_spm_eos_id(void* handle) { return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->eos_id(); }

// The id of a piece, or -1 for text that is no piece of the model.
int steady_spm_piece_id(void* handle, const char* piece) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
  const int id = sp->PieceToId(piece);
  return id >= 0 && id < sp->GetPieceSize() && sp->IdToPiece(id) == piece ? id : -1;
}

// Returns malloc'ed ids (*n of them), or null with *n = 0 on error.
int32_t* steady_spm_encode(void* handle, const char* text, size_t len, size_t* n) {
  std::vector<int> ids;
  *n = 0;
  const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Encode(std::string(text, len), &ids);
  if (!status.ok()) return nullptr;
  auto* out = static_cast<int32_t*>(std::malloc(sizeof(int32_t) * (ids.size() + 1)));
  for (size_t i = 0; i < ids.size(); ++i) out[i] = ids[i];
  *n = ids.size();
  return out;
}

// Returns malloc'ed UTF-8 bytes (*len of them), or null on error. Ids must be in range (checked by
// the caller).
char* steady_spm_decode(void* handle, const int32_t* ids, size_t n, size_t* len) {
  std::string text;
  *len = 0;
  const auto status =
      static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Decode(std::vector<int>(ids, ids + n), &text);
  if (!status.ok()) return nullptr;
  auto* out = static_cast<char*>(std::malloc(text.size() + 1));
  std::memcpy(out, text.data(), text.size());
  *len = text.size();
  return out;
}

}  // extern "C"
