// steady chat-template: a model directory's Jinja chat template rendered over a conversation, printed
// exactly (no newline added), as transformers renders it for apply_chat_template.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "model/text/hf/tokenizer_config.h"
#include "model/text/jinja/jinja.h"
#include "tools/steady/commands.h"

namespace steady {
namespace {

absl::StatusOr<nlohmann::ordered_json> ReadJsonFile(const std::string& path, const char* what) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON (", what, ")"));
  return j;
}

// --batch: {"template": s, "context": {...}} per stdin line -> {"text": s} or {"error": s} per line
// (the form tests/reference/hf_reference.mjs's render mode reads and writes).
absl::Status RenderBatch() {
  std::string line;
  for (int n = 1; std::getline(std::cin, line); ++n) {
    if (line.empty()) continue;
    const std::string where = absl::StrCat("stdin line ", n);
    const nlohmann::ordered_json q = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!q.is_object() || !q.contains("template") || !q["template"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected {\"template\": \"...\", \"context\": {...}}"));
    }
    auto parsed = JinjaTemplate::Parse(q["template"].get<std::string>(), where);
    const absl::StatusOr<std::string> text =
        parsed.ok() ? parsed->Render(q.value("context", nlohmann::ordered_json::object())) : parsed.status();
    const nlohmann::ordered_json answer = text.ok() ? nlohmann::ordered_json{{"text", *text}}
                                                    : nlohmann::ordered_json{{"error", std::string(text.status().message())}};
    std::printf("%s\n", answer.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  }
  return absl::OkStatus();
}

absl::Status RunChatTemplate(const Flags& flags) {
  if (flags.Has("batch")) return RenderBatch();
  auto dir = flags.Require("model");
  auto messages_path = flags.Require("messages");
  if (!dir.ok()) return dir.status();
  if (!messages_path.ok()) return messages_path.status();
  // A GGUF file carries its template as tokenizer.chat_template.
  const bool gguf = IsGgufFile(*dir);
  const std::string config_path = gguf ? *dir + " (tokenizer.chat_template)" : *dir + "/tokenizer_config.json";
  absl::StatusOr<hf::TokenizerConfig> config;
  if (gguf) {
    config = LoadGgufTokenizerConfig(*dir);
  } else {
    auto config_text = ReadWholeFile(config_path);
    if (!config_text.ok()) return config_text.status();
    config = hf::ParseTokenizerConfig(*config_text, config_path);
  }
  if (!config.ok()) return config.status();

  nlohmann::ordered_json context;
  auto messages = ReadJsonFile(*messages_path, "--messages");
  if (!messages.ok()) return messages.status();
  if (!messages->is_array()) return absl::InvalidArgumentError(absl::StrCat(*messages_path, ": expected a JSON list of messages"));
  context["messages"] = *messages;
  bool has_tools = false;
  if (flags.Has("tools")) {
    auto tools = ReadJsonFile(flags.Get("tools"), "--tools");
    if (!tools.ok()) return tools.status();
    if (!tools->is_array()) return absl::InvalidArgumentError(absl::StrCat(flags.Get("tools"), ": expected a JSON list of tools"));
    context["tools"] = *tools;
    has_tools = true;
  }
  context["add_generation_prompt"] = !flags.Has("no-generation-prompt");
  if (flags.Has("vars")) {  // more variables, as apply_chat_template's keyword arguments
    auto vars = ReadJsonFile(flags.Get("vars"), "--vars");
    if (!vars.ok()) return vars.status();
    if (!vars->is_object()) return absl::InvalidArgumentError(absl::StrCat(flags.Get("vars"), ": expected a JSON object"));
    for (const auto& [k, v] : vars->items()) context[k] = v;
  }
  const std::pair<const char*, const std::optional<std::string>*> specials[] = {
      {"bos_token", &config->bos_token}, {"eos_token", &config->eos_token},
      {"unk_token", &config->unk_token}, {"pad_token", &config->pad_token}};
  for (const auto& [name, value] : specials) {
    if (*value) context[name] = **value;
  }

  // Which template: chat_template.jinja beside the config wins (transformers' newer layout); else the
  // config's, by --template NAME, or "tool_use" when tools are given and there is one, or "default".
  std::string where, source;
  const std::string jinja_path = *dir + "/chat_template.jinja";
  if (std::filesystem::exists(jinja_path) && !flags.Has("template")) {
    auto text = ReadWholeFile(jinja_path);
    if (!text.ok()) return text.status();
    where = jinja_path;
    source = *text;
  } else {
    std::string name = flags.Has("template") ? flags.Get("template") : "default";
    if (!flags.Has("template") && has_tools && config->chat_templates.count("tool_use")) name = "tool_use";
    auto it = config->chat_templates.find(name);
    if (it == config->chat_templates.end()) {
      return absl::NotFoundError(absl::StrCat(config_path, ": no chat_template", name == "default" ? "" : " named " + name,
                                              " (and no chat_template.jinja)"));
    }
    where = absl::StrCat(config_path, ": chat_template", name == "default" ? "" : " " + name);
    source = it->second;
  }
  auto parsed = JinjaTemplate::Parse(source, where);
  if (!parsed.ok()) return parsed.status();
  auto text = parsed->Render(context);
  if (!text.ok()) return text.status();
  std::fwrite(text->data(), 1, text->size(), stdout);
  return absl::OkStatus();
}

}  // namespace

Command ChatTemplateCommand() {
  return {"chat-template",
          R"(usage: steady chat-template --model DIR|FILE.gguf --messages FILE.json [--tools FILE.json]
                           [--no-generation-prompt] [--template NAME] [--vars FILE.json]
       steady chat-template --batch     {"template": s, "context": {...}} per stdin line
                                        -> {"text": s} or {"error": s} per line

Renders DIR's Jinja chat template (chat_template.jinja, or tokenizer_config.json's "chat_template";
--template picks one of its named templates, "tool_use" is taken when --tools is given), or a GGUF
file's tokenizer.chat_template, over the
messages (a JSON list of {"role", "content", ...}) and prints the prompt exactly, with no newline
added. The template sees messages, tools, add_generation_prompt (true unless
--no-generation-prompt), the special tokens of tokenizer_config.json (bos_token, eos_token, ...) and
the members of --vars' object (e.g. {"enable_thinking": false}). Errors name the template's line.
)",
          {.with_value = {"model", "messages", "tools", "template", "vars"}, .switches = {"no-generation-prompt", "batch"}},
          RunChatTemplate};
}

}  // namespace steady
