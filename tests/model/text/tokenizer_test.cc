#include "model/text/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "base/utf8.h"
#include "tests/testutil.h"

namespace steady {
namespace {

std::unique_ptr<Tokenizer> Load() {
  auto t = Tokenizer::Load(testing::SourcePath("tests/data/tokenizer/tokenizer.model"));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(TokenizerTest, RoundTripsTextIncludingNonAscii) {
  auto t = Load();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->vocab_size(), 512);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  for (const std::string text : {"This License applies to any program.", "naïve café — 東京 🙂", "a  b\tc"}) {
    auto ids = t->Encode(text);
    ASSERT_TRUE(ids.ok());
    auto back = t->Decode(*ids);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, text);
  }
}

TEST(TokenizerTest, StreamedTextEqualsWholeDecode) {
  auto t = Load();
  ASSERT_TRUE(t);
  const std::string text = "Copyright holders — 版权 🙂 may distribute copies, verbatim.";
  auto ids = t->Encode(text);
  ASSERT_TRUE(ids.ok());
  TextStreamer streamer(*t);
  std::string streamed;
  for (int32_t id : *ids) {
    auto piece = streamer.Add(id);
    ASSERT_TRUE(piece.ok());
    // Every piece is whole UTF-8 (no half characters reach a client).
    if (!piece->empty()) {
      EXPECT_NE(static_cast<unsigned char>(piece->front()) & 0xC0, 0x80);
    }
    streamed += *piece;
  }
  auto tail = streamer.Flush();
  ASSERT_TRUE(tail.ok());
  streamed += *tail;
  EXPECT_EQ(streamed, text);
}

// A tokenizer.json whose vocabulary is single bytes only, so that every character outside ASCII
// is split over 2-4 tokens: byte-level (GPT-2's byte-to-character alphabet, as Llama 3 and Qwen) or
// sentencepiece-style with byte fallback (<0xNN> pieces, as Llama 2, Mistral and Gemma).
std::unique_ptr<Tokenizer> ByteTokenizer(bool byte_level) {
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json j;
  if (byte_level) {
    int extra = 0;
    for (int b = 0; b < 256; ++b) {  // bytes_to_unicode(): printable Latin-1 as itself, others shifted
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? char32_t(b) : char32_t(256 + extra++);
      vocab[Utf8(c)] = b;
    }
    const nlohmann::json level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                  {"use_regex", true}};
    j["pre_tokenizer"] = level;
    j["decoder"] = level;
  } else {
    char name[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      vocab[name] = b;
    }
    vocab["\xe2\x96\x81"] = 256;  // the metaspace piece itself
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}, {"prepend_scheme", "never"},
                          {"split", false}};
    j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}},
                                                         {"content", " "}},
                                                        {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  }
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}, {"byte_fallback", !byte_level}};
  j["added_tokens"] = nlohmann::json::array();
  const std::string dir = testing::MakeTempDir(byte_level ? "bytelevel" : "bytefallback");
  std::ofstream(dir + "/tokenizer.json") << j.dump();
  auto t = Tokenizer::LoadFromDirectory(dir);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(TokenizerTest, TokenizerJsonStreamsWholeCharactersOnly) {
  const std::string text = "naïve café — 東京 🙂 ok";
  for (const bool byte_level : {true, false}) {
    auto t = ByteTokenizer(byte_level);
    ASSERT_TRUE(t);
    auto ids = t->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_GT(ids->size(), 20u) << byte_level;  // the characters really are split over byte tokens
    auto whole = t->Decode(*ids);
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(*whole, text) << byte_level;
    TextStreamer streamer(*t);
    std::string streamed;
    for (int32_t id : *ids) {
      auto piece = streamer.Add(id);
      ASSERT_TRUE(piece.ok()) << piece.status();
      EXPECT_TRUE(IsValidUtf8(*piece)) << byte_level << ": a piece with half a character";
      streamed += *piece;
    }
    auto tail = streamer.Flush();
    ASSERT_TRUE(tail.ok());
    EXPECT_EQ(streamed + *tail, text) << byte_level;
  }
}

TEST(TokenizerTest, ContinuationStreamKeepsTheSpaceAfterThePrompt) {
  auto t = Load();
  ASSERT_TRUE(t);
  const std::string text = "Copyright holders may distribute copies of the Program, verbatim.";
  auto ids = t->Encode(text);
  ASSERT_TRUE(ids.ok());
  ASSERT_GT(ids->size(), 6u);
  // The generated part begins at a word ("▁..."), mid-text: a start-mode stream would drop its space.
  for (size_t split = 1; split < ids->size(); ++split) {
    auto head = t->Decode(std::vector<int32_t>(ids->begin(), ids->begin() + split));
    ASSERT_TRUE(head.ok());
    TextStreamer streamer(*t, TextStreamer::Mode::kContinuation);
    std::string streamed;
    for (size_t i = split; i < ids->size(); ++i) {
      auto piece = streamer.Add((*ids)[i]);
      ASSERT_TRUE(piece.ok()) << piece.status();
      streamed += *piece;
    }
    auto tail = streamer.Flush();
    ASSERT_TRUE(tail.ok());
    streamed += *tail;
    EXPECT_EQ(*head + streamed, text) << "split at token " << split;
  }
}

TEST(TokenizerTest, ErrorsAreClear) {
  auto missing = Tokenizer::Load("/nonexistent/tokenizer.model");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("/nonexistent/tokenizer.model"), std::string::npos);
  const std::string garbage = testing::MakeTempDir("tok") + "/garbage.model";
  std::ofstream(garbage) << "this is not a protobuf";
  auto bad = Tokenizer::Load(garbage);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("garbage.model"), std::string::npos);
  auto t = Load();
  ASSERT_TRUE(t);
  auto out_of_range = t->Decode({5, 512});
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_NE(std::string(out_of_range.status().message()).find("512"), std::string::npos);
}

}  // namespace
}  // namespace steady
