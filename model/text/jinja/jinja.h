// model/text/jinja/: Jinja chat templates as Hugging Face models ship them (tokenizer_config.json's
// "chat_template", chat_template.jinja), rendered as @huggingface/jinja (transformers.js) renders
// them: statements (if/elif/else, for with `loop` and else, set and set blocks, namespace, macro,
// filter blocks, break/continue), whitespace control, expressions with slicing, the string and dict
// methods, filters and tests the templates use, raise_exception, range and strftime_now.
// Includes base/ and absl only; the engine never names it (the tools and the gateway's edge do).
#ifndef STEADY_MODEL_TEXT_JINJA_JINJA_H_
#define STEADY_MODEL_TEXT_JINJA_JINJA_H_

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace steady {

namespace jinja {
struct Node;
}

class JinjaTemplate {
 public:
  // INVALID_ARGUMENT "WHERE: line N: ..." for a template that does not parse.
  static absl::StatusOr<JinjaTemplate> Parse(const std::string& source, const std::string& where);

  // Renders with `context`'s members as the template's variables (messages, tools,
  // add_generation_prompt, bos_token, ...); a variable not there is undefined. Errors (a
  // raise_exception, a type error) are INVALID_ARGUMENT naming the line.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<const jinja::Node> root_;
  std::string where_;
};

}  // namespace steady

#endif  // STEADY_MODEL_TEXT_JINJA_JINJA_H_
