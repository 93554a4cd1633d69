#include "model/text/hf/bpe.h"

#include <algorithm>
#include <climits>
#include <mutex>

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

struct WordCache::Shard {
  std::mutex mu;
  absl::flat_hash_map<std::string, std::vector<int32_t>> words;  // guarded by mu
};

WordCache::WordCache() : shards_(new Shard[kShards]) {}
WordCache::~WordCache() = default;
WordCache::WordCache(WordCache&&) noexcept = default;
WordCache& WordCache::operator=(WordCache&&) noexcept = default;

bool WordCache::Get(std::string_view word, std::vector<int32_t>* ids) const {
  Shard& shard = shards_[std::hash<std::string_view>()(word) % kShards];
  std::lock_guard lock(shard.mu);
  auto it = shard.words.find(Av(word));
  if (it == shard.words.end()) return false;
  ids->insert(ids->end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::Put(std::string_view word, const int32_t* ids, size_t n) const {
  Shard& shard = shards_[std::hash<std::string_view>()(word) % kShards];
  std::lock_guard lock(shard.mu);
  if (shard.words.size() >= kShardEntries) shard.words.clear();
  shard.words.try_emplace(std::string(word), ids, ids + n);
}

absl::Status ReadTokenizerJson(std::string_view text, const std::string& name, Json* rest, BpeTables* tables) {
  // Where the parser is: one frame per open object or array, with the key being read in objects.
  struct Frame {
    bool object;
    std::string key;
  };
  std::vector<Frame> frames;
  BpeTables::Pair pending;  // a [left, right] merge being read
  int pending_count = 0;
  auto in = [&](size_t depth, const char* key) { return frames.size() > depth && frames[depth].key == key; };
  auto in_model = [&](const char* key) { return frames.size() >= 3 && in(0, "model") && in(1, key); };
  Json::parser_callback_t callback = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        frames.push_back({event == Json::parse_event_t::object_start, ""});
        if (frames.size() == 3 && in_model("vocab") && frames[2].object) tables->has_vocab = true;
        if (frames.size() == 3 && in_model("merges") && !frames[2].object) tables->has_merges = true;
        if (frames.size() == 4 && in_model("merges") && !frames[2].object) {
          pending = BpeTables::Pair();
          pending_count = 0;
        }
        return true;
      case Json::parse_event_t::key:
        if (!frames.empty()) frames.back().key = parsed.get<std::string>();
        return true;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        frames.pop_back();
        if (frames.size() == 3 && in_model("merges") && !frames[2].object) {  // a [left, right] merge ends
          pending.well_formed = pending.well_formed && pending_count == 2;
          tables->merges.push_back(std::move(pending));
          return false;
        }
        return true;
      case Json::parse_event_t::value:
        if (frames.size() == 3 && in_model("vocab") && frames[2].object) {
          tables->vocab.emplace_back(frames[2].key, parsed.is_number_integer() ? parsed.get<int64_t>() : int64_t(-1));
          return false;
        }
        if (frames.size() == 3 && in_model("merges") && !frames[2].object) {
          BpeTables::Pair pair;
          const std::string s = parsed.is_string() ? parsed.get<std::string>() : "";
          const size_t space = s.find(' ');
          pair.well_formed = space != std::string::npos && s.find(' ', space + 1) == std::string::npos;
          if (pair.well_formed) {
            pair.left = s.substr(0, space);
            pair.right = s.substr(space + 1);
          }
          tables->merges.push_back(std::move(pair));
          return false;
        }
        if (frames.size() == 4 && in_model("merges") && !frames[2].object) {
          if (!parsed.is_string()) pending.well_formed = false;
          else if (pending_count == 0) pending.left = parsed.get<std::string>();
          else if (pending_count == 1) pending.right = parsed.get<std::string>();
          ++pending_count;
          return false;
        }
        return true;
    }
    return true;
  };
  try {
    *rest = Json::parse(text, callback);
  } catch (const Json::exception& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, ..."
    if (size_t close = what.find("] "); close != std::string::npos) what = what.substr(close + 2);
    return absl::InvalidArgumentError(absl::StrCat(name, ": not valid JSON: ", what));
  }
  return absl::OkStatus();
}

absl::StatusOr<Bpe> Bpe::Parse(const Json& j, BpeTables& tables, const std::string& path, bool byte_level) {
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

  if (!tables.has_vocab) return FieldError(Child(path, "vocab"), "missing (an object of token: id)");
  absl::flat_hash_map<std::string, int32_t> by_token;  // in the vocabulary's own alphabet
  by_token.reserve(tables.vocab.size());
  constexpr int64_t kMaxId = (int64_t(1) << 24) - 1;
  for (auto& [token, id] : tables.vocab) {
    if (id < 0 || id > kMaxId) {
      return FieldError(Child(Child(path, "vocab"), token), absl::StrCat("expected an id in [0, ", kMaxId, "]"));
    }
    const int32_t i = int32_t(id);
    if (size_t(i) >= bpe.tokens_.size()) bpe.tokens_.resize(size_t(i) + 1);
    bpe.tokens_[i] = token;
    by_token[std::move(token)] = i;
  }
  tables.vocab.clear();
  tables.vocab.shrink_to_fit();
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

  bpe.merges_.reserve(tables.merges.size());
  std::string joined;
  for (size_t i = 0; i < tables.merges.size(); ++i) {
    const BpeTables::Pair& m = tables.merges[i];
    const std::string where = Index(Child(path, "merges"), i);
    if (!m.well_formed) return FieldError(where, "expected \"left right\" or [left, right]");
    joined.assign(m.left).append(m.right);
    auto a = by_token.find(m.left), b = by_token.find(m.right), ab = by_token.find(joined);
    if (a == by_token.end() || b == by_token.end() || ab == by_token.end()) {
      return FieldError(where, absl::StrCat("\"", a == by_token.end() ? m.left : b == by_token.end() ? m.right : joined,
                                            "\" is not in the vocabulary"));
    }
    bpe.merges_.try_emplace(PairKey(a->second, b->second), Merge{int32_t(i), ab->second});
  }
  tables.merges.clear();
  if (!byte_level) {
    constexpr std::string_view kMetaspace = "\xE2\x96\x81";
    bpe.split_at_metaspace_ = by_token.contains(Av(kMetaspace));
    for (const auto& [token, id] : by_token) {
      for (size_t at = token.find(kMetaspace, 1); at != std::string::npos && bpe.split_at_metaspace_;
           at = token.find(kMetaspace, at + 1)) {
        const bool after_metaspace =
            at >= kMetaspace.size() && token.compare(at - kMetaspace.size(), kMetaspace.size(), kMetaspace) == 0;
        if (!after_metaspace) bpe.split_at_metaspace_ = false;
      }
      if (!bpe.split_at_metaspace_) break;
    }
    bpe.vocab_ = std::move(by_token);
  }
  return bpe;
}

int32_t Bpe::Lookup(std::string_view piece) const {
  auto it = vocab_.find(Av(piece));
  return it == vocab_.end() ? -1 : it->second;
}

// The merge loop for short words: each step takes the lowest rank among the adjacent pairs (the
// leftmost of equal ones), keeping each pair's rank so that a merge looks up only its two new pairs.
void Bpe::MergeShort(std::vector<int32_t>* symbols, std::vector<uint32_t>* lengths) const {
  std::vector<int32_t>& sym = *symbols;
  std::vector<uint32_t>& len = *lengths;
  int32_t rank[kShortWord], merged[kShortWord];
  auto lookup = [&](size_t i) {
    auto it = merges_.find(PairKey(sym[i], sym[i + 1]));
    rank[i] = it == merges_.end() ? INT32_MAX : it->second.rank;
    merged[i] = it == merges_.end() ? -1 : it->second.id;
  };
  size_t n = sym.size();
  for (size_t i = 0; i + 1 < n; ++i) lookup(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == INT32_MAX) break;
    sym[best] = merged[best];
    len[best] += len[best + 1];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      sym[i] = sym[i + 1];
      len[i] = len[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) lookup(best - 1);
    if (best + 1 < n) lookup(best);
  }
  sym.resize(n);
  len.resize(n);
}

// Merges in place: `symbols` and `lengths` come back holding the final symbols. Long words (a whole
// text, for sentencepiece-style tokenizers without a pre-tokenizer) go through a heap.
void Bpe::MergeSymbols(std::vector<int32_t>* symbols, std::vector<uint32_t>* lengths) const {
  const int32_t n = int32_t(symbols->size());
  if (n < 2) return;
  if (size_t(n) <= kShortWord) return MergeShort(symbols, lengths);
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
  if (split_at_metaspace_ && word.size() > kCachedBytes) {
    constexpr std::string_view kMetaspace = "\xE2\x96\x81";
    size_t start = 0;
    for (size_t at = word.find(kMetaspace, 1); at != std::string_view::npos; at = word.find(kMetaspace, at + 1)) {
      if (at >= kMetaspace.size() && word.compare(at - kMetaspace.size(), kMetaspace.size(), kMetaspace) == 0) {
        continue;  // inside a run of them
      }
      EncodePiece(word.substr(start, at - start), ids);
      start = at;
    }
    return EncodePiece(word.substr(start), ids);
  }
  EncodePiece(word, ids);
}

void Bpe::EncodePiece(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.size() > kCachedBytes) return EncodeUncached(word, ids);  // rare, and mostly one-offs
  if (cache_.Get(word, ids)) return;
  const size_t before = ids->size();
  EncodeUncached(word, ids);
  cache_.Put(word, ids->data() + before, ids->size() - before);
}

void Bpe::EncodeUncached(std::string_view word, std::vector<int32_t>* ids) const {
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
