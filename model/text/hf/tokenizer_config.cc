#include "model/text/hf/tokenizer_config.h"

#include "base/status.h"
#include "model/text/hf/json_fields.h"

namespace steady::hf {
namespace {

// A special token: "text", or {"content": "text", ...} (transformers' AddedToken, with or without
// "__type").
absl::StatusOr<std::optional<std::string>> ReadToken(const Json& j, const char* key) {
  const Json* v = Find(j, key);
  if (!v) return std::optional<std::string>();
  if (v->is_string()) return std::optional<std::string>(v->get<std::string>());
  if (v->is_object()) {
    auto content = ReadString(*v, key, "content");
    if (!content.ok()) return content.status();
    return std::optional<std::string>(*content);
  }
  return Unexpected(key, "a string or an object with \"content\"", *v);
}

absl::Status Parse(const Json& j, TokenizerConfig* c) {
  if (!j.is_object()) return Unexpected("(top level)", "an object", j);
  std::pair<const char*, std::optional<std::string>*> tokens[] = {
      {"bos_token", &c->bos_token}, {"eos_token", &c->eos_token}, {"unk_token", &c->unk_token}, {"pad_token", &c->pad_token}};
  for (auto& [key, out] : tokens) {
    auto token = ReadToken(j, key);
    if (!token.ok()) return token.status();
    *out = *std::move(token);
  }
  if (const Json* extra = Find(j, "additional_special_tokens")) {
    if (!extra->is_array()) return Unexpected("additional_special_tokens", "a list", *extra);
    for (size_t i = 0; i < extra->size(); ++i) {
      const Json& t = (*extra)[i];
      if (t.is_string()) {
        c->additional_special_tokens.push_back(t.get<std::string>());
      } else if (t.is_object() && t.contains("content") && t["content"].is_string()) {
        c->additional_special_tokens.push_back(t["content"].get<std::string>());
      } else {
        return Unexpected(Index("additional_special_tokens", i), "a string or an object with \"content\"", t);
      }
    }
  }
  auto clean = ReadBool(j, "", "clean_up_tokenization_spaces", true);
  if (!clean.ok()) return clean.status();
  c->clean_up_tokenization_spaces = *clean;
  if (const Json* t = Find(j, "chat_template")) {
    if (t->is_string()) {
      c->chat_templates["default"] = t->get<std::string>();
    } else if (t->is_array()) {
      for (size_t i = 0; i < t->size(); ++i) {
        const std::string where = Index("chat_template", i);
        auto name = ReadString((*t)[i], where, "name");
        auto text = ReadString((*t)[i], where, "template");
        if (!name.ok() || !text.ok()) return !name.ok() ? name.status() : text.status();
        c->chat_templates[*name] = *text;
      }
    } else {
      return Unexpected("chat_template", "a string or a list of {\"name\", \"template\"}", *t);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view json, const std::string& name) {
  auto j = ParseJsonText(json, name);
  if (!j.ok()) return j.status();
  TokenizerConfig c;
  if (absl::Status st = Parse(*j, &c); !st.ok()) return WithContext(st, name);
  return c;
}

}  // namespace steady::hf
