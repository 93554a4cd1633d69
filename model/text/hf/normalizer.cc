#include "model/text/hf/normalizer.h"

#include "base/utf8.h"

namespace steady::hf {

absl::Status ParsePattern(const Json& owner, const std::string& path, std::optional<std::string>* literal,
                          std::optional<Regex>* regex) {
  const std::string where = Child(path, "pattern");
  const Json* p = Find(owner, "pattern");
  if (!p || !p->is_object()) return Unexpected(where, "{\"String\": ...} or {\"Regex\": ...}", p ? *p : Json());
  if (const Json* s = Find(*p, "String")) {
    if (!s->is_string()) return Unexpected(Child(where, "String"), "a string", *s);
    *literal = s->get<std::string>();
    return absl::OkStatus();
  }
  const Json* r = Find(*p, "Regex");
  if (!r || !r->is_string()) return Unexpected(where, "{\"String\": ...} or {\"Regex\": ...}", *p);
  auto translated = TranslatePattern(r->get<std::string>());
  if (!translated.ok()) return FieldError(Child(where, "Regex"), translated.status().message());
  auto compiled = Regex::Compile(*translated);
  if (!compiled.ok()) return FieldError(Child(where, "Regex"), compiled.status().message());
  *regex = *std::move(compiled);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReplaceAll(const std::optional<std::string>& literal, const std::optional<Regex>& regex,
                                       const std::string& text, const std::string& content) {
  std::string out;
  if (literal) {
    if (literal->empty()) {  // JavaScript inserts the replacement between every two characters
      for (size_t i = 0; i < text.size();) {
        size_t len;
        DecodeUtf8At(text, i, &len);
        out += content;
        out.append(text, i, len);
        i += len;
      }
      return out + content;
    }
    size_t from = 0;
    for (size_t at = text.find(*literal); at != std::string::npos; at = text.find(*literal, from)) {
      out.append(text, from, at - from);
      out += content;
      from = at + literal->size();
    }
    out.append(text, from);
    return out;
  }
  size_t from = 0;
  absl::Status st = regex->ForEachMatch(text, [&](size_t begin, size_t end) {
    out.append(text, from, begin - from);
    out += content;
    from = end;
  });
  if (!st.ok()) return st;
  out.append(text, from);
  return out;
}

absl::StatusOr<Normalizer> ParseNormalizer(const Json& j, const std::string& path) {
  auto type = ReadType(j, path);
  if (!type.ok()) return type.status();
  Normalizer n;
  if (*type == "Sequence") {
    const Json* steps = Find(j, "normalizers");
    if (!steps || !steps->is_array()) return Unexpected(Child(path, "normalizers"), "a list", steps ? *steps : Json());
    for (size_t i = 0; i < steps->size(); ++i) {
      if ((*steps)[i].is_null()) continue;
      auto step = ParseNormalizer((*steps)[i], Index(Child(path, "normalizers"), i));
      if (!step.ok()) return step.status();
      n.steps.push_back(*std::move(step));
    }
  } else if (*type == "NFC" || *type == "NFD" || *type == "NFKC" || *type == "NFKD") {
    n.kind = Normalizer::Kind::kForm;
    n.form = *type == "NFC" ? NormalForm::kNFC : *type == "NFD" ? NormalForm::kNFD : *type == "NFKC" ? NormalForm::kNFKC
                                                                                                      : NormalForm::kNFKD;
  } else if (*type == "Lowercase") {
    n.kind = Normalizer::Kind::kLowercase;
  } else if (*type == "StripAccents") {
    n.kind = Normalizer::Kind::kStripAccents;
  } else if (*type == "Strip") {
    n.kind = Normalizer::Kind::kStrip;
    auto left = ReadBool(j, path, "strip_left", false);
    auto right = ReadBool(j, path, "strip_right", false);
    if (!left.ok() || !right.ok()) return !left.ok() ? left.status() : right.status();
    n.strip_left = *left;
    n.strip_right = *right;
  } else if (*type == "Replace") {
    n.kind = Normalizer::Kind::kReplace;
    if (absl::Status st = ParsePattern(j, path, &n.literal, &n.regex); !st.ok()) return st;
    auto content = ReadString(j, path, "content", "");
    if (!content.ok()) return content.status();
    n.content = *content;
  } else if (*type == "Prepend") {
    n.kind = Normalizer::Kind::kPrepend;
    auto prepend = ReadString(j, path, "prepend");
    if (!prepend.ok()) return prepend.status();
    n.content = *prepend;
  } else {
    return FieldError(Child(path, "type"),
                      absl::StrCat("normalizer \"", *type,
                                   "\" is not supported (Sequence, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, "
                                   "Strip, Replace, Prepend are)"));
  }
  return n;
}

absl::StatusOr<std::string> Normalize(const Normalizer& n, std::string text) {
  switch (n.kind) {
    case Normalizer::Kind::kSequence:
      for (const Normalizer& step : n.steps) {
        auto next = Normalize(step, std::move(text));
        if (!next.ok()) return next.status();
        text = *std::move(next);
      }
      return text;
    case Normalizer::Kind::kForm:
      return NormalizeForm(text, n.form);
    case Normalizer::Kind::kLowercase:
      return Lowercase(text);
    case Normalizer::Kind::kStripAccents: {
      std::string out;
      for (size_t i = 0; i < text.size();) {
        size_t len;
        if (!IsMark(DecodeUtf8At(text, i, &len))) out.append(text, i, len);
        i += len;
      }
      return out;
    }
    case Normalizer::Kind::kStrip: {
      std::string_view v = text;
      if (n.strip_left) v = TrimStart(v, IsJsWhiteSpace);
      if (n.strip_right) v = TrimEnd(v, IsJsWhiteSpace);
      return std::string(v);
    }
    case Normalizer::Kind::kReplace:
      return ReplaceAll(n.literal, n.regex, text, n.content);
    case Normalizer::Kind::kPrepend:
      return n.content + text;
  }
  return text;
}

}  // namespace steady::hf
