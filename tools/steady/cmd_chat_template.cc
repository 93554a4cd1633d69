// steady chat-template: a model directory's Jinja chat template rendered over a conversation, printed
// exactly (no newline added), as transformers renders it for apply_chat_template.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "model/load.h"
#include "model/text/chat_format.h"
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
  ChatInput input;
  auto messages = ReadJsonFile(*messages_path, "--messages");
  if (!messages.ok()) return messages.status();
  if (!messages->is_array()) return absl::InvalidArgumentError(absl::StrCat(*messages_path, ": expected a JSON list of messages"));
  input.messages = *messages;
  if (flags.Has("tools")) {
    auto tools = ReadJsonFile(flags.Get("tools"), "--tools");
    if (!tools.ok()) return tools.status();
    if (!tools->is_array()) return absl::InvalidArgumentError(absl::StrCat(flags.Get("tools"), ": expected a JSON list of tools"));
    input.tools = *tools;
  }
  input.add_generation_prompt = !flags.Has("no-generation-prompt");
  if (flags.Has("vars")) {  // more variables, as apply_chat_template's keyword arguments
    auto vars = ReadJsonFile(flags.Get("vars"), "--vars");
    if (!vars.ok()) return vars.status();
    if (!vars->is_object()) return absl::InvalidArgumentError(absl::StrCat(flags.Get("vars"), ": expected a JSON object"));
    input.vars = *vars;
  }
  // The template the server would use (model/text/chat_format.h), or the one --template names.
  auto format = LoadChatFormatFor(*dir, /*own=*/nullptr, flags.Get("template"));
  if (!format.ok()) return format.status();
  auto text = (*format)->Render(input);
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
