#include "model/text/chat_format.h"

#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "model/text/hf/tokenizer_config.h"
#include "model/text/jinja/jinja.h"

namespace steady {
namespace {

using Json = nlohmann::ordered_json;

// A list, even an empty one, is given: templates tell `tools` undefined (or none) from [] (Llama 3.1
// renders its tool preamble for []).
bool HasTools(const ChatInput& input) { return input.tools.is_array(); }

// The leading system messages of a conversation, as a conversation of their own.
Json LeadingSystem(const Json& messages) {
  Json out = Json::array();
  for (const Json& m : messages) {
    if (!m.is_object() || m.value("role", "") != "system") break;
    out.push_back(m);
  }
  return out;
}

class SmallChatFormat final : public ChatFormat {
 public:
  SmallChatFormat(ChatTemplate t, std::string source) : t_(std::move(t)), source_(std::move(source)) {}

  absl::StatusOr<std::string> Render(const ChatInput& input, size_t* system_bytes) const override {
    if (HasTools(input) && !input.tools.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tools: the model's chat template (", source_,
                                                     ", Steady's small format) renders no tools"));
    }
    if (!input.messages.is_array()) return absl::InvalidArgumentError("messages: expected a list");
    std::vector<ChatMessage> messages;
    for (size_t i = 0; i < input.messages.size(); ++i) {
      const Json& m = input.messages[i];
      const std::string where = absl::StrCat("messages[", i, "]");
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": expected an object with a string role"));
      }
      for (const char* key : {"tool_calls", "tool_call_id"}) {
        if (m.contains(key) && !m[key].is_null() && !(m[key].is_array() && m[key].empty()) &&
            !(m[key].is_string() && m[key].get<std::string>().empty())) {
          return absl::InvalidArgumentError(absl::StrCat(where, ".", key, ": the model's chat template (", source_,
                                                         ", Steady's small format) renders no tool calls"));
        }
      }
      const Json content = m.value("content", Json(""));
      if (!content.is_string() && !content.is_null()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".content: expected a string"));
      }
      messages.push_back({m["role"].get<std::string>(), content.is_string() ? content.get<std::string>() : ""});
    }
    return RenderChat(t_, messages, input.add_generation_prompt, system_bytes);
  }
  const std::vector<std::string>& stop() const override { return t_.stop; }
  ToolCallStyle tool_call_style() const override { return ToolCallStyle::kNone; }
  bool continues_sessions() const override { return true; }
  const std::string& source() const override { return source_; }

 private:
  ChatTemplate t_;
  std::string source_;
};

ToolCallStyle StyleOf(const std::string& source) {
  if (absl::StrContains(source, "<tool_call>")) return ToolCallStyle::kHermes;
  // Llama 3.1+: "Respond in the format {"name": function name, "parameters": ...}".
  if (absl::StrContains(source, "\"parameters\"") && absl::StrContains(source, "tools")) return ToolCallStyle::kLlamaJson;
  return ToolCallStyle::kNone;
}

class JinjaChatFormat final : public ChatFormat {
 public:
  JinjaChatFormat(JinjaTemplate main, std::string where, std::optional<JinjaTemplate> tool_use, ToolCallStyle style,
                  Json specials)
      : main_(std::move(main)), where_(std::move(where)), tool_use_(std::move(tool_use)), style_(style),
        specials_(std::move(specials)) {}

  absl::StatusOr<std::string> Render(const ChatInput& input, size_t* system_bytes) const override {
    const bool tools = HasTools(input);
    const JinjaTemplate& t = tools && tool_use_ ? *tool_use_ : main_;
    Json context = specials_;
    context["messages"] = input.messages;
    if (tools) context["tools"] = input.tools;
    context["add_generation_prompt"] = input.add_generation_prompt;
    for (const auto& [k, v] : input.vars.items()) context[k] = v;
    auto text = t.Render(context);
    if (!text.ok() || system_bytes == nullptr) return text;
    *system_bytes = 0;
    // The system messages' own rendering, when the whole prompt starts with it (a template that puts
    // something between them and the rest, or moves them, gets no boundary).
    Json system = LeadingSystem(input.messages);
    if (!system.empty()) {
      context["messages"] = std::move(system);
      context["add_generation_prompt"] = false;
      auto head = t.Render(context);
      if (head.ok() && !head->empty() && absl::StartsWith(*text, *head)) *system_bytes = head->size();
    }
    return text;
  }
  const std::vector<std::string>& stop() const override { return no_stop_; }
  ToolCallStyle tool_call_style() const override { return style_; }
  bool continues_sessions() const override { return false; }
  const std::string& source() const override { return where_; }

 private:
  JinjaTemplate main_;
  std::string where_;
  std::optional<JinjaTemplate> tool_use_;
  ToolCallStyle style_;
  Json specials_;
  std::vector<std::string> no_stop_;
};

}  // namespace

const char* ToolCallStyleName(ToolCallStyle style) {
  switch (style) {
    case ToolCallStyle::kHermes: return "hermes";
    case ToolCallStyle::kLlamaJson: return "llama3_json";
    case ToolCallStyle::kNone: break;
  }
  return "";
}

std::unique_ptr<ChatFormat> MakeSmallChatFormat(ChatTemplate t, std::string source) {
  return std::make_unique<SmallChatFormat>(std::move(t), std::move(source));
}

absl::StatusOr<std::unique_ptr<ChatFormat>> MakeJinjaChatFormat(const JinjaChatSources& s) {
  auto main = JinjaTemplate::Parse(s.source, s.where);
  if (!main.ok()) return main.status();
  std::optional<JinjaTemplate> tool_use;
  if (!s.tool_use_source.empty()) {
    auto parsed = JinjaTemplate::Parse(s.tool_use_source, s.tool_use_where);
    if (!parsed.ok()) return parsed.status();
    tool_use = *std::move(parsed);
  }
  Json specials = Json::object();
  const std::pair<const char*, const std::string*> tokens[] = {
      {"bos_token", &s.bos_token}, {"eos_token", &s.eos_token}, {"unk_token", &s.unk_token}, {"pad_token", &s.pad_token}};
  for (const auto& [name, value] : tokens) {
    if (!value->empty()) specials[name] = *value;
  }
  const ToolCallStyle style = StyleOf(s.tool_use_source.empty() ? s.source : s.tool_use_source);
  return std::unique_ptr<ChatFormat>(
      std::make_unique<JinjaChatFormat>(*std::move(main), s.where, std::move(tool_use), style, std::move(specials)));
}

absl::StatusOr<std::unique_ptr<ChatFormat>> ChatFormatFromConfig(const std::optional<hf::TokenizerConfig>& config,
                                                                const std::string& config_where, const ChatTemplate* own,
                                                                const std::string& template_name,
                                                                const std::string& jinja_path) {
  JinjaChatSources s;
  if (config) {
    s.bos_token = config->bos_token.value_or("");
    s.eos_token = config->eos_token.value_or("");
    s.unk_token = config->unk_token.value_or("");
    s.pad_token = config->pad_token.value_or("");
  }
  if (template_name.empty() && !jinja_path.empty()) {  // transformers' newer layout wins
    auto text = ReadWholeFile(jinja_path);
    if (!text.ok()) return text.status();
    s.source = *std::move(text);
    s.where = jinja_path;
    return MakeJinjaChatFormat(s);
  }
  const std::string name = template_name.empty() ? "default" : template_name;
  if (config && config->chat_templates.count(name)) {
    s.source = config->chat_templates.at(name);
    s.where = absl::StrCat(config_where, ": chat_template", name == "default" ? "" : " " + name);
    if (template_name.empty() && config->chat_templates.count("tool_use")) {
      s.tool_use_source = config->chat_templates.at("tool_use");
      s.tool_use_where = absl::StrCat(config_where, ": chat_template tool_use");
    }
    return MakeJinjaChatFormat(s);
  }
  if (!template_name.empty() || (config && !config->chat_templates.empty()) || own == nullptr) {
    return absl::NotFoundError(absl::StrCat(config_where, ": no chat_template",
                                            name == "default" ? "" : " named " + name, " (and no chat_template.jinja)"));
  }
  return MakeSmallChatFormat(*own, "config.json chat_template");
}

absl::StatusOr<std::unique_ptr<ChatFormat>> LoadChatFormat(const std::string& dir, const ChatTemplate* own,
                                                           const std::string& template_name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string config_path = dir + "/tokenizer_config.json";
  const std::string jinja_path = dir + "/chat_template.jinja";
  std::optional<hf::TokenizerConfig> config;
  if (fs::exists(config_path, ec)) {
    auto text = ReadWholeFile(config_path);
    if (!text.ok()) return text.status();
    auto parsed = hf::ParseTokenizerConfig(*text, config_path);
    if (!parsed.ok()) return parsed.status();
    config = *std::move(parsed);
  }
  return ChatFormatFromConfig(config, config_path, own, template_name, fs::exists(jinja_path, ec) ? jinja_path : "");
}

}  // namespace steady
