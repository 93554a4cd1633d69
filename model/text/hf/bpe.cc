#include "model/text/hf/bpe.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/utf8.h"

namespace steady::hf {

const std::array<char32_t, 256>& ByteToChar() {
  // Printable Latin-1 bytes stand for themselves; the others, in byte order, for 256, 257, ...
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? char32_t(b) : next++;
    }
    return t;
  }();
  return table;
}

int CharToByte(char32_t c) {
  static const absl::flat_hash_map<char32_t, int> inverse = [] {
    absl::flat_hash_map<char32_t, int> m;
    for (int b = 0; b < 256; ++b) m[ByteToChar()[b]] = b;
    return m;
  }();
  auto it = inverse.find(c);
  return it == inverse.end() ? -1 : it->second;
}

namespace {

// A byte-level token as the raw bytes it stands for; false if a character is outside the alphabet.
bool Unmap(std::string_view token, std::string* bytes) {
  bytes->clear();
  for (size_t i = 0; i < token.size();) {
    size_t len;
    const int b = CharToByte(DecodeUtf8At(token, i, &len));
    if (b < 0) return false;
    bytes->push_back(char(b));
    i += len;
  }
  return true;
}

absl::Status ReadMergePair(const Json& m, const std::string& path, std::string* left, std::string* right) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return Unexpected(path, "\"left right\"", m);
    }
    *left = s.substr(0, space);
    *right = s.substr(space + 1);
    return absl::OkStatus();
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    *left = m[0].get<std::string>();
    *right = m[1].get<std::string>();
    return absl::OkStatus();
  }
  return Unexpected(path, "\"left right\" or [left, right]", m);
}

// Scratch space for one word, per thread (Encode is const and runs on many threads).
struct Scratch {
  std::vector<int32_t> symbols;
  std::vector<uint32_t> lengths;
  std::vector<int32_t> prev, next;
  struct Entry {
    int32_t rank, pos, id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Entry> heap;
};

Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

absl::StatusOr<Bpe> Bpe::Parse(const Json& j, const std::string& path, bool byte_level) {
  const Json* type = Find(j, "type");
  if (type && *type != "BPE") {
    return FieldError(Child(path, "type"), absl::StrCat("model ", type->dump(), " is not supported (BPE is)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* v = Find(j, key);
    if (v && !(v->is_string() && v->get<std::string>().empty())) {
      return FieldError(Child(path, key), "a non-empty value is not supported");
    }
  }
  Bpe bpe;
  bpe.byte_level_ = byte_level;
  auto byte_fallback = ReadBool(j, path, "byte_fallback", false);
  auto fuse_unk = ReadBool(j, path, "fuse_unk", false);
  auto ignore_merges = ReadBool(j, path, "ignore_merges", false);
  auto unk = ReadString(j, path, "unk_token", "");
  for (const absl::Status& st : {byte_fallback.status(), fuse_unk.status(), ignore_merges.status(), unk.status()}) {
    if (!st.ok()) return st;
  }
  bpe.byte_fallback_ = *byte_fallback;
  bpe.fuse_unk_ = *fuse_unk;
  bpe.ignore_merges_ = *ignore_merges;

  const Json* vocab = Find(j, "vocab");
  if (!vocab || !vocab->is_object()) return Unexpected(Child(path, "vocab"), "an object of token: id", vocab ? *vocab : Json());
  absl::flat_hash_map<std::string, int32_t> by_token;  // in the vocabulary's own alphabet
  by_token.reserve(vocab->size());
  constexpr int64_t kMaxId = (int64_t(1) << 24) - 1;
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxId) {
      return Unexpected(Child(Child(path, "vocab"), token), absl::StrCat("an id in [0, ", kMaxId, "]"), id);
    }
    const int32_t i = int32_t(id.get<int64_t>());
    by_token[token] = i;
    if (size_t(i) >= bpe.tokens_.size()) bpe.tokens_.resize(size_t(i) + 1);
    bpe.tokens_[i] = token;
  }
  if (byte_level) {
    std::string bytes;
    bpe.vocab_.reserve(by_token.size());
    for (const auto& [token, id] : by_token) {
      if (Unmap(token, &bytes)) bpe.vocab_[bytes] = id;
    }
    for (int b = 0; b < 256; ++b) {
      auto it = bpe.vocab_.find(std::string(1, char(b)));
      bpe.byte_ids_[b] = it == bpe.vocab_.end() ? -1 : it->second;
    }
  } else {
    bpe.vocab_ = by_token;
    bpe.byte_ids_.fill(-1);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = by_token.find(absl::StrFormat("<0x%02X>", b));
    bpe.fallback_ids_[b] = it == by_token.end() ? -1 : it->second;
  }
  if (!unk->empty()) {
    auto it = by_token.find(*unk);
    bpe.unk_id_ = it == by_token.end() ? -1 : it->second;
  }

  const Json* merges = Find(j, "merges");
  if (merges && !merges->is_array()) return Unexpected(Child(path, "merges"), "a list", *merges);
  if (merges) {
    bpe.merges_.reserve(merges->size());
    std::string left, right;
    for (size_t i = 0; i < merges->size(); ++i) {
      const std::string where = Index(Child(path, "merges"), i);
      if (absl::Status st = ReadMergePair((*merges)[i], where, &left, &right); !st.ok()) return st;
      auto a = by_token.find(left), b = by_token.find(right), ab = by_token.find(left + right);
      if (a == by_token.end() || b == by_token.end() || ab == by_token.end()) {
        return FieldError(where, absl::StrCat("\"", a == by_token.end() ? left : b == by_token.end() ? right : left + right,
                                              "\" is not in the vocabulary"));
      }
      bpe.merges_.try_emplace(PairKey(a->second, b->second), Merge{int32_t(i), ab->second});
    }
  }
  return bpe;
}

int32_t Bpe::Lookup(std::string_view piece) const {
  auto it = vocab_.find(Av(piece));
  return it == vocab_.end() ? -1 : it->second;
}

// Merges in place: `symbols` and `lengths` come back holding the final symbols.
void Bpe::MergeSymbols(std::vector<int32_t>* symbols, std::vector<uint32_t>* lengths) const {
  const int32_t n = int32_t(symbols->size());
  if (n < 2) return;
  Scratch& s = ThreadScratch();
  std::vector<int32_t>& sym = *symbols;
  std::vector<uint32_t>& len = *lengths;
  s.prev.resize(n);
  s.next.resize(n);
  s.heap.clear();
  auto push = [&](int32_t pos) {
    auto it = merges_.find(PairKey(sym[pos], sym[s.next[pos]]));
    if (it == merges_.end()) return;
    s.heap.push_back({it->second.rank, pos, it->second.id});
    std::push_heap(s.heap.begin(), s.heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i < n; ++i) {
    s.prev[i] = i - 1;
    s.next[i] = i + 1 < n ? i + 1 : -1;
  }
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), std::greater<>());
    const Scratch::Entry top = s.heap.back();
    s.heap.pop_back();
    const int32_t pos = top.pos, right = s.next[pos];
    if (len[pos] == 0 || right < 0) continue;
    // An entry whose pair has changed since it was queued is stale.
    auto it = merges_.find(PairKey(sym[pos], sym[right]));
    if (it == merges_.end() || it->second.id != top.id) continue;
    sym[pos] = top.id;
    len[pos] += len[right];
    len[right] = 0;
    s.next[pos] = s.next[right];
    if (s.next[pos] >= 0) s.prev[s.next[pos]] = pos;
    if (s.prev[pos] >= 0) push(s.prev[pos]);
    if (s.next[pos] >= 0) push(pos);
  }
  int32_t out = 0;
  for (int32_t i = 0; i >= 0; i = s.next[i]) {
    sym[out] = sym[i];
    len[out] = len[i];
    ++out;
  }
  sym.resize(out);
  len.resize(out);
}

void Bpe::EmitUnknown(std::string_view piece, bool* last_was_unk, std::vector<int32_t>* ids) const {
  if (byte_fallback_) {
    bool all = true;
    for (unsigned char b : piece) all = all && fallback_ids_[b] >= 0;
    if (all) {
      for (unsigned char b : piece) ids->push_back(fallback_ids_[b]);
      *last_was_unk = false;
      return;
    }
  }
  if (unk_id_ < 0) return;  // no unknown token: the piece is dropped, as both references do
  if (fuse_unk_ && *last_was_unk) return;
  ids->push_back(unk_id_);
  *last_was_unk = true;
}

void Bpe::Encode(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const int32_t id = Lookup(word); id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  Scratch& s = ThreadScratch();
  std::vector<int32_t> symbols = std::move(s.symbols);
  std::vector<uint32_t> lengths = std::move(s.lengths);
  symbols.clear();
  lengths.clear();
  if (byte_level_) {
    for (unsigned char b : word) {
      symbols.push_back(byte_ids_[b]);
      lengths.push_back(1);
    }
  } else {
    for (size_t i = 0; i < word.size();) {
      size_t len;
      DecodeUtf8At(word, i, &len);
      symbols.push_back(Lookup(word.substr(i, len)));
      lengths.push_back(uint32_t(len));
      i += len;
    }
  }
  MergeSymbols(&symbols, &lengths);
  bool last_was_unk = false;
  size_t at = 0;
  for (size_t k = 0; k < symbols.size(); ++k) {
    if (symbols[k] >= 0) {
      ids->push_back(symbols[k]);
      last_was_unk = false;
    } else {
      EmitUnknown(word.substr(at, lengths[k]), &last_was_unk, ids);
    }
    at += lengths[k];
  }
  s.symbols = std::move(symbols);
  s.lengths = std::move(lengths);
}

}  // namespace steady::hf
