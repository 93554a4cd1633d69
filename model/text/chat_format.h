// How a model turns chat messages into prompt text, behind one interface: the Jinja chat template a
// Hugging Face model directory ships (tokenizer_config.json's "chat_template", or
// chat_template.jinja; rendered by model/text/jinja/ as transformers renders it), or, for Steady's own
// checkpoints that have none, the small format of config.json (chat_template.h). The server and the
// tools pick nothing themselves: LoadChatFormat decides, and the rest sees a ChatFormat.
//
// Messages are JSON as OpenAI and transformers write them: {"role", "content"} plus, for tool
// calling, an assistant's "tool_calls" and a tool result's "tool_call_id" / "name". The small format
// reads role and content only and renders no tools.
#ifndef STEADY_MODEL_TEXT_CHAT_FORMAT_H_
#define STEADY_MODEL_TEXT_CHAT_FORMAT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "model/text/chat_template.h"
#include "model/text/hf/tokenizer_config.h"

namespace steady {

struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null, or OpenAI's list of {"type": "function", "function": {...}}
  bool add_generation_prompt = true;
  // More template variables, as apply_chat_template's keyword arguments (e.g. enable_thinking).
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
};

// How the model writes a tool call in its output (read by the OpenAI edge, which turns the calls into
// "tool_calls"): found from the template's own text.
enum class ToolCallStyle {
  kNone,       // the template renders no tools
  kHermes,     // Qwen, Hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
  kLlamaJson,  // Llama 3.1+: {"name": ..., "parameters": {...}} as the whole answer
};
const char* ToolCallStyleName(ToolCallStyle style);  // "", "hermes", "llama3_json"

class ChatFormat {
 public:
  virtual ~ChatFormat() = default;
  // The prompt text. INVALID_ARGUMENT naming the message (a role the format does not know) or the
  // template's line (a template error, a raise_exception). `system_bytes`, when given, gets the length
  // of the text of the leading "system" messages (0 when that text is not a prefix of the prompt):
  // where requests that share a system prompt part ways.
  virtual absl::StatusOr<std::string> Render(const ChatInput& input, size_t* system_bytes = nullptr) const = 0;
  // Stop strings every chat request gets (the small format's "stop"; a Jinja template's turns end
  // with the model's end-of-sequence tokens instead).
  virtual const std::vector<std::string>& stop() const = 0;
  virtual ToolCallStyle tool_call_style() const = 0;
  // Whether the messages of one call, rendered alone, continue a session's earlier turns. The small
  // format's do; a Jinja template renders a whole conversation (BOS, a default system prompt), so a
  // session cannot take its messages turn by turn.
  virtual bool continues_sessions() const = 0;
  // What was loaded, for logs and errors: "config.json chat_template" or the template's file.
  virtual const std::string& source() const = 0;
};

// Steady's small format.
std::unique_ptr<ChatFormat> MakeSmallChatFormat(ChatTemplate t, std::string source);

// A Jinja template's text (`where` names it in errors), with the special tokens' text the template
// may use (bos_token, eos_token, ...; empty ones are left undefined). `tool_use_source`, when not
// empty, is the template taken when a call has tools (tokenizer_config.json's named "tool_use").
struct JinjaChatSources {
  std::string source, where;
  std::string tool_use_source, tool_use_where;
  std::string bos_token, eos_token, unk_token, pad_token;
};
absl::StatusOr<std::unique_ptr<ChatFormat>> MakeJinjaChatFormat(const JinjaChatSources& sources);

// A model directory's chat format: chat_template.jinja when there is one, else tokenizer_config.json's
// "chat_template" (its "default" template, and "tool_use" for calls with tools), else the small
// format `own` (config.json's, or the default; null: NOT_FOUND). `template_name`, when not empty,
// picks a named template of tokenizer_config.json instead (NOT_FOUND when there is none).
// INVALID_ARGUMENT naming the file and the line for a template that does not parse.
absl::StatusOr<std::unique_ptr<ChatFormat>> LoadChatFormat(const std::string& dir, const ChatTemplate* own,
                                                           const std::string& template_name = "");
// The same choice from a tokenizer configuration already read (`config_where` names it in errors; a
// GGUF file's comes from its metadata: model/load.h) and a chat_template.jinja file ("": none).
absl::StatusOr<std::unique_ptr<ChatFormat>> ChatFormatFromConfig(const std::optional<hf::TokenizerConfig>& config,
                                                                const std::string& config_where, const ChatTemplate* own,
                                                                const std::string& template_name,
                                                                const std::string& jinja_path);

}  // namespace steady

#endif  // STEADY_MODEL_TEXT_CHAT_FORMAT_H_
