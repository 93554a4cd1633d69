// Chat messages to prompt text: the "chat_template" object of config.json, in a small format of our
// own (docs/checkpoint-format.md, "Chat template"), with a default for models that have none.
//
//   "chat_template": {
//     "system": "{content}\n",            one string per role; {content} is replaced by the message
//     "user": "\nUser: {content}",
//     "assistant": "\nAssistant: {content}",
//     "generation_prompt": "\nAssistant:",  appended when the model is to answer
//     "stop": ["\nUser:"]                   stop strings added to every chat request
//   }
//
// Every message's text starts with its own separator, so a session can take new messages turn after
// turn, and the assistant's generated text needs no closing suffix.
#ifndef STEADY_MODEL_TEXT_CHAT_TEMPLATE_H_
#define STEADY_MODEL_TEXT_CHAT_TEMPLATE_H_

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace steady {

struct ChatMessage {
  std::string role;
  std::string content;
};

struct ChatTemplate {
  std::map<std::string, std::string> roles;  // role -> text with one {content}
  std::string generation_prompt;
  std::vector<std::string> stop;

  bool operator==(const ChatTemplate&) const = default;
  nlohmann::json ToJson() const;
};

// The template of models whose config.json has none ("User:" / "Assistant:" lines).
const ChatTemplate& DefaultChatTemplate();
// INVALID_ARGUMENT naming the key for a malformed object: a role string without exactly one
// {content}, a non-string, an unknown key.
absl::StatusOr<ChatTemplate> ParseChatTemplate(const nlohmann::json& j, const std::string& where);
// The messages as prompt text, then the generation prompt when `add_generation_prompt`.
// INVALID_ARGUMENT naming a role the template does not know. `system_bytes`, when given, gets the
// length of the text of the leading "system" messages (0 without any): where requests that share a
// system prompt part ways.
absl::StatusOr<std::string> RenderChat(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt, size_t* system_bytes = nullptr);

}  // namespace steady

#endif  // STEADY_MODEL_TEXT_CHAT_TEMPLATE_H_
