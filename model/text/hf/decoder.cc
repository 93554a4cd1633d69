#include "model/text/hf/decoder.h"

#include "base/utf8.h"
#include "model/text/hf/bpe.h"
#include "model/text/hf/normalizer.h"

namespace steady::hf {
namespace {

std::string ReplaceLiteral(const std::string& text, std::string_view from, std::string_view to) {
  std::string out;
  size_t prev = 0;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, prev)) {
    out.append(text, prev, at - prev);
    out += to;
    prev = at + from.size();
  }
  out.append(text, prev);
  return out;
}

// A byte-level run of tokens to text: each character to its byte, then UTF-8 with replacement. A
// token holding a character outside the alphabet stands for its own UTF-8 bytes (the Rust rule).
std::string ByteLevelText(const std::vector<std::string>& tokens, size_t begin, size_t end) {
  std::string bytes;
  for (size_t t = begin; t < end; ++t) {
    const std::string& token = tokens[t];
    const size_t mark = bytes.size();
    bool mapped = true;
    for (size_t i = 0; i < token.size() && mapped;) {
      size_t len;
      const int b = CharToByte(DecodeUtf8At(token, i, &len));
      if (b < 0) mapped = false;
      else bytes.push_back(char(b));
      i += len;
    }
    if (!mapped) {
      bytes.resize(mark);
      bytes += token;
    }
  }
  return Utf8Lossy(bytes);
}

bool ByteToken(const std::string& token, unsigned char* byte) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return false;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = token[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return false;
    value = value * 16 + digit;
  }
  *byte = static_cast<unsigned char>(value);
  return true;
}

}  // namespace

absl::StatusOr<Decoder> ParseDecoder(const Json& j, const std::string& path) {
  auto type = ReadType(j, path);
  if (!type.ok()) return type.status();
  Decoder d;
  if (*type == "Sequence") {
    const Json* steps = Find(j, "decoders");
    if (!steps || !steps->is_array()) return Unexpected(Child(path, "decoders"), "a list", steps ? *steps : Json());
    for (size_t i = 0; i < steps->size(); ++i) {
      auto step = ParseDecoder((*steps)[i], Index(Child(path, "decoders"), i));
      if (!step.ok()) return step.status();
      d.steps.push_back(*std::move(step));
    }
  } else if (*type == "ByteLevel") {
    d.kind = Decoder::Kind::kByteLevel;
  } else if (*type == "Metaspace") {
    d.kind = Decoder::Kind::kMetaspace;
    auto replacement = ReadString(j, path, "replacement", "\xE2\x96\x81");
    auto legacy = ReadBool(j, path, "add_prefix_space", true);
    if (!replacement.ok() || !legacy.ok()) return !replacement.ok() ? replacement.status() : legacy.status();
    auto scheme = ReadString(j, path, "prepend_scheme", *legacy ? "always" : "never");
    if (!scheme.ok()) return scheme.status();
    if (replacement->empty()) return FieldError(Child(path, "replacement"), "must not be empty");
    d.replacement = *replacement;
    d.strip_first_space = *scheme != "never";
  } else if (*type == "ByteFallback") {
    d.kind = Decoder::Kind::kByteFallback;
  } else if (*type == "Fuse") {
    d.kind = Decoder::Kind::kFuse;
  } else if (*type == "Strip") {
    d.kind = Decoder::Kind::kStrip;
    auto content = ReadString(j, path, "content", " ");
    auto start = ReadInt(j, path, "start", 0, 0, 1 << 20);
    auto stop = ReadInt(j, path, "stop", 0, 0, 1 << 20);
    for (const absl::Status& st : {content.status(), start.status(), stop.status()}) {
      if (!st.ok()) return st;
    }
    size_t len = 0;
    if (content->empty() || (DecodeUtf8At(*content, 0, &len), len != content->size())) {
      return FieldError(Child(path, "content"), "must be one character");
    }
    d.content = *content;
    d.start = int(*start);
    d.stop = int(*stop);
  } else if (*type == "Replace") {
    d.kind = Decoder::Kind::kReplace;
    if (absl::Status st = ParsePattern(j, path, &d.literal, &d.regex); !st.ok()) return st;
    auto content = ReadString(j, path, "content", "");
    if (!content.ok()) return content.status();
    d.content = *content;
  } else {
    return FieldError(Child(path, "type"),
                      absl::StrCat("decoder \"", *type,
                                   "\" is not supported (Sequence, ByteLevel, Metaspace, ByteFallback, Fuse, Strip, "
                                   "Replace are)"));
  }
  return d;
}

absl::Status DecodeChain(const Decoder& d, const std::function<bool(const std::string&)>& is_added,
                         std::vector<std::string>* tokens) {
  std::vector<std::string>& t = *tokens;
  switch (d.kind) {
    case Decoder::Kind::kSequence:
      for (const Decoder& step : d.steps) {
        if (absl::Status st = DecodeChain(step, [](const std::string&) { return false; }, tokens); !st.ok()) return st;
      }
      return absl::OkStatus();
    case Decoder::Kind::kByteLevel: {
      std::vector<std::string> out;
      size_t run = 0;
      for (size_t i = 0; i <= t.size(); ++i) {
        if (i < t.size() && !is_added(t[i])) continue;
        if (i > run) out.push_back(ByteLevelText(t, run, i));
        if (i < t.size()) out.push_back(t[i]);
        run = i + 1;
      }
      t = std::move(out);
      break;
    }
    case Decoder::Kind::kMetaspace:
      for (size_t i = 0; i < t.size(); ++i) {
        t[i] = ReplaceLiteral(t[i], d.replacement, " ");
        if (i == 0 && d.strip_first_space && !t[i].empty() && t[i][0] == ' ') t[i].erase(0, 1);
      }
      break;
    case Decoder::Kind::kByteFallback: {
      std::vector<std::string> out;
      std::string bytes;
      bool in_bytes = false;
      for (const std::string& token : t) {
        unsigned char b;
        if (ByteToken(token, &b)) {
          bytes.push_back(char(b));
          in_bytes = true;
          continue;
        }
        if (in_bytes) out.push_back(Utf8Lossy(bytes));
        bytes.clear();
        in_bytes = false;
        out.push_back(token);
      }
      if (in_bytes) out.push_back(Utf8Lossy(bytes));
      t = std::move(out);
      break;
    }
    case Decoder::Kind::kFuse: {
      std::string all;
      for (const std::string& token : t) all += token;
      t = {all};
      break;
    }
    case Decoder::Kind::kStrip:
      for (std::string& token : t) {
        size_t begin = 0, end = token.size();
        for (int i = 0; i < d.start && token.compare(begin, d.content.size(), d.content) == 0; ++i) {
          begin += d.content.size();
        }
        for (int i = 0; i < d.stop && end >= begin + d.content.size() &&
                        token.compare(end - d.content.size(), d.content.size(), d.content) == 0;
             ++i) {
          end -= d.content.size();
        }
        token = token.substr(begin, end - begin);
      }
      break;
    case Decoder::Kind::kReplace:
      for (std::string& token : t) {
        auto replaced = ReplaceAll(d.literal, d.regex, token, d.content);
        if (!replaced.ok()) return replaced.status();
        token = *std::move(replaced);
      }
      break;
  }
  return absl::OkStatus();
}

std::string CleanUpTokenization(std::string text) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) text = ReplaceLiteral(text, from, to);
  return text;
}

}  // namespace steady::hf
