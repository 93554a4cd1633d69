#include "model/text/chat_template.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace steady {
namespace {

constexpr char kContent[] = "{content}";

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

const ChatTemplate& DefaultChatTemplate() {
  static const ChatTemplate t{{{"system", "{content}\n"},
                               {"user", "\nUser: {content}"},
                               {"assistant", "\nAssistant: {content}"}},
                              "\nAssistant:",
                              {"\nUser:"}};
  return t;
}

nlohmann::json ChatTemplate::ToJson() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [role, text] : roles) j[role] = text;
  j["generation_prompt"] = generation_prompt;
  j["stop"] = stop;
  return j;
}

absl::StatusOr<ChatTemplate> ParseChatTemplate(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": expected an object"));
  ChatTemplate t;
  for (const auto& [key, value] : j.items()) {
    if (key == "stop") {
      if (!value.is_array()) return absl::InvalidArgumentError(absl::StrCat(where, ".stop: expected a list of strings"));
      for (const nlohmann::json& s : value) {
        if (!s.is_string() || s.get<std::string>().empty()) {
          return absl::InvalidArgumentError(absl::StrCat(where, ".stop: expected non-empty strings, got ", s.dump()));
        }
        t.stop.push_back(s.get<std::string>());
      }
      continue;
    }
    if (!value.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".", key, ": expected a string, got ", value.dump()));
    }
    const std::string text = value.get<std::string>();
    if (key == "generation_prompt") {
      t.generation_prompt = text;
      continue;
    }
    if (Count(text, kContent) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".", key, ": a role's text must hold {content} exactly once, got \"", text, "\""));
    }
    t.roles[key] = text;
  }
  if (t.roles.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": no roles"));
  return t;
}

absl::StatusOr<std::string> RenderChat(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt, size_t* system_bytes) {
  std::string out;
  if (system_bytes) *system_bytes = 0;
  bool leading_system = true;
  for (size_t i = 0; i < messages.size(); ++i) {
    auto it = t.roles.find(messages[i].role);
    if (it == t.roles.end()) {
      std::vector<std::string> known;
      for (const auto& [role, text] : t.roles) known.push_back(role);
      return absl::InvalidArgumentError(absl::StrCat("messages[", i, "].role: \"", messages[i].role,
                                                     "\" is not one of the model's roles (",
                                                     absl::StrJoin(known, ", "), ")"));
    }
    const size_t at = it->second.find(kContent);
    absl::StrAppend(&out, it->second.substr(0, at), messages[i].content,
                    it->second.substr(at + sizeof(kContent) - 1));
    leading_system = leading_system && messages[i].role == "system";
    if (system_bytes && leading_system) *system_bytes = out.size();
  }
  if (add_generation_prompt) out += t.generation_prompt;
  return out;
}

}  // namespace steady
