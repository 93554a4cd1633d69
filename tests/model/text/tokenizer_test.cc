#include "model/text/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>

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
