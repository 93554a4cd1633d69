// steady tokenize: a model directory's tokenizer on stdin's text (or ids), as JSON on stdout.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "model/text/tokenizer.h"
#include "tools/steady/commands.h"

namespace steady {
namespace {

std::string Dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return absl::InvalidArgumentError(absl::StrCat(where, ": expected a JSON list of token ids"));
  std::vector<int32_t> ids;
  for (const nlohmann::json& id : j) {
    if (!id.is_number_integer()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", id.dump(), " is not a token id"));
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

// One input (text, or a JSON list of ids with --decode) to its JSON answer.
absl::StatusOr<nlohmann::json> Answer(const Tokenizer& t, const std::string& input, bool decode, bool add_special,
                                      const DecodeOptions& options, const std::string& where) {
  if (decode) {
    auto ids = ParseIds(input, where);
    if (!ids.ok()) return ids.status();
    auto text = t.Decode(*ids, options);
    if (!text.ok()) return text.status();
    return nlohmann::json{{"text", *text}};
  }
  auto ids = t.Encode(input, add_special);
  if (!ids.ok()) return ids.status();
  return nlohmann::json{{"ids", *ids}};
}

absl::Status RunTokenize(const Flags& flags) {
  auto dir = flags.Require("model");
  if (!dir.ok()) return dir.status();
  auto tokenizer = LoadTokenizer(*dir);
  if (!tokenizer.ok()) return tokenizer.status();
  const bool decode = flags.Has("decode");
  DecodeOptions options;
  options.skip_special_tokens = flags.Has("skip-special");
  options.clean_up_tokenization_spaces = !flags.Has("no-clean-up");
  if (!flags.Has("batch")) {
    const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    auto answer = Answer(**tokenizer, input, decode, flags.Has("add-special"), options, "stdin");
    if (!answer.ok()) return answer.status();
    std::printf("%s\n", Dump(*answer).c_str());
    return absl::OkStatus();
  }
  // --batch: one JSON value per line (a string to encode, or a list of ids to decode), one answer
  // per line; a line that fails gets {"error": "..."} and the rest go on.
  std::string line;
  for (int n = 1; std::getline(std::cin, line); ++n) {
    if (line.empty()) continue;
    const std::string where = absl::StrCat("stdin line ", n);
    std::string input = line;
    if (!decode) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_string()) return absl::InvalidArgumentError(absl::StrCat(where, ": expected a JSON string"));
      input = j.get<std::string>();
    }
    auto answer = Answer(**tokenizer, input, decode, flags.Has("add-special"), options, where);
    std::printf("%s\n", Dump(answer.ok() ? *answer : nlohmann::json{{"error", std::string(answer.status().message())}}).c_str());
  }
  return absl::OkStatus();
}

}  // namespace

Command TokenizeCommand() {
  return {"tokenize", R"(usage: steady tokenize --model DIR|FILE.gguf [--add-special] text on stdin -> {"ids": [...]}
       steady tokenize --model DIR|FILE.gguf --decode [--skip-special] [--no-clean-up]
                                                                  ids (a JSON list) -> {"text": "..."}
                   [--batch]   one JSON string (or list of ids) per stdin line, one answer per line

DIR needs only the tokenizer: tokenizer.json (with tokenizer_config.json) or tokenizer.model.
--add-special puts the tokenizer's special tokens around the text (BOS), as Hugging Face's encode()
does by default. --decode follows Hugging Face's decode(): clean_up_tokenization_spaces when the
tokenizer's config asks for it (--no-clean-up: never), special tokens kept unless --skip-special.
)",
          {.with_value = {"model"}, .switches = {"add-special", "decode", "skip-special", "no-clean-up", "batch"}},
          RunTokenize};
}

}  // namespace steady
