// Constrained decoding and n > 1 choices in the engine: rows with and without a constraint in the same steps, each
// constrained text complete and of its schema, equal to GenerateText with the same seed; max_tokens
// ends a constraint early with "length", a stop string still stops, and the prefix cache serves a
// constrained request exactly as a cold one.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <future>

#include "model/backend/backend.h"
#include "model/constrain/token_bytes.h"
#include "model/generate.h"
#include "server/engine/engine.h"
#include "tests/server/engine/engine_harness.h"

namespace steady {
namespace {

using testing::Job;
using testing::Options;
using testing::Outcome;
using testing::StartEngine;
using testing::SubmitAsync;
using testing::Taylor;
using testing::TestTokenizer;

// A finite language: every text is complete within ~80 tokens.
constexpr char kSchema[] = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8},
    "n": {"type": "integer", "minimum": 0, "maximum": 999},
    "ok": {"type": "boolean"},
    "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 2}},
  "required": ["name", "n", "ok", "tags"], "additionalProperties": false})";

std::shared_ptr<const Constraint> Compiled(const Model& m, ConstraintSpec spec) {
  auto vocab = MakeTokenVocabulary(TestTokenizer(), m.vocab_size(),
                                   std::vector<int32_t>(m.config().eos_token_ids.begin(), m.config().eos_token_ids.end()));
  EXPECT_TRUE(vocab.ok()) << vocab.status();
  auto c = Constraint::Compile(spec, *vocab);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

GenerateJob ConstrainedJob(const std::string& prompt, int64_t max_tokens, uint64_t seed,
                           std::shared_ptr<const Constraint> c) {
  GenerateJob j = Job("", prompt, max_tokens);
  j.sampling.temperature = 1.0f;
  j.sampling.seed = seed;
  j.constraint = std::move(c);
  return j;
}

void ExpectOfSchema(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << text;
  ASSERT_TRUE(j.is_object() && j.size() == 4) << text;
  EXPECT_TRUE(j["name"].is_string()) << text;
  EXPECT_TRUE(j["n"].is_number_integer() && j["n"] >= 0 && j["n"] <= 999) << text;
  EXPECT_TRUE(j["ok"].is_boolean()) << text;
  ASSERT_TRUE(j["tags"].is_array() && j["tags"].size() <= 2) << text;
  for (const auto& t : j["tags"]) EXPECT_TRUE(t == "red" || t == "green") << text;
}

TEST(ConstrainedEngine, MixedBatchesMatchGenerateText) {
  const Model m = Taylor();
  auto schema = Compiled(m, {ConstraintSpec::Kind::kJsonSchema, kSchema});
  auto engine = StartEngine(m, Options());
  std::vector<std::future<Outcome>> constrained, free;
  for (int i = 0; i < 6; ++i) {
    constrained.push_back(SubmitAsync(*engine, ConstrainedJob("Answer in JSON:", 200, 100 + i, schema)));
    GenerateJob plain = Job("", "Once upon a time", 20);
    plain.sampling.temperature = 1.0f;
    plain.sampling.seed = 200 + i;
    free.push_back(SubmitAsync(*engine, std::move(plain)));
  }
  for (int i = 0; i < 6; ++i) {
    Outcome c = constrained[i].get();
    ASSERT_TRUE(c.status.ok()) << c.status;
    EXPECT_EQ(c.finish_reason, "stop");
    ExpectOfSchema(c.text);
    // The same request alone, through model/generate.h.
    std::unique_ptr<Backend> cpu = MakeCpuBackend(m, {});
    GenerateRequest r;
    r.prompt = "Answer in JSON:";
    r.max_tokens = 200;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 100 + i;
    r.constraint = schema;
    auto ref = GenerateText(m, TestTokenizer(), *cpu, 0, r);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(c.text, ref->text);
    Outcome f = free[i].get();
    ASSERT_TRUE(f.status.ok()) << f.status;
    EXPECT_EQ(f.usage.completion_tokens, 20);  // unconstrained rows run to max_tokens as before
  }
}

TEST(ConstrainedEngine, MaxTokensEndsItWithLengthAndAStopStringStillStops) {
  const Model m = Taylor();
  auto json = Compiled(m, {ConstraintSpec::Kind::kJsonObject, ""});
  auto engine = StartEngine(m, Options());
  Outcome cut = SubmitAsync(*engine, ConstrainedJob("JSON:", 3, 7, json)).get();
  ASSERT_TRUE(cut.status.ok()) << cut.status;
  EXPECT_EQ(cut.finish_reason, "length");
  EXPECT_EQ(cut.usage.completion_tokens, 3);
  EXPECT_EQ(cut.text[0], '{');
  EXPECT_TRUE(nlohmann::json::parse(cut.text, nullptr, false).is_discarded()) << cut.text;

  auto grammar = Compiled(m, {ConstraintSpec::Kind::kGrammar, "root ::= \"ab\" [0-9]+ \"STOP\" [a-z]*\n"});
  GenerateJob j = ConstrainedJob("x", 400, 3, grammar);
  j.stop = {"STOP"};
  Outcome stopped = SubmitAsync(*engine, std::move(j)).get();
  ASSERT_TRUE(stopped.status.ok()) << stopped.status;
  EXPECT_EQ(stopped.finish_reason, "stop");
  ASSERT_GE(stopped.text.size(), 3u);
  EXPECT_EQ(stopped.text.substr(0, 2), "ab");
  EXPECT_EQ(stopped.text.find("STOP"), std::string::npos);
  EXPECT_TRUE(std::all_of(stopped.text.begin() + 2, stopped.text.end(), ::isdigit)) << stopped.text;
}

TEST(ConstrainedEngine, PrefixCacheHitGivesTheColdAnswer) {
  const Model m = Taylor();
  auto schema = Compiled(m, {ConstraintSpec::Kind::kJsonSchema, kSchema});
  EngineOptions o = Options();
  o.prefix_cache_bytes = 64 << 20;
  o.prefix_cache_interval = 8;
  auto engine = StartEngine(m, o);
  const std::string prompt = "A long shared system prompt that the cache keeps, then the question: JSON please.";
  Outcome cold = SubmitAsync(*engine, ConstrainedJob(prompt, 200, 11, schema)).get();
  Outcome warm = SubmitAsync(*engine, ConstrainedJob(prompt, 200, 11, schema)).get();
  ASSERT_TRUE(cold.status.ok() && warm.status.ok()) << cold.status << warm.status;
  EXPECT_EQ(cold.usage.cached_tokens, 0);
  EXPECT_GT(warm.usage.cached_tokens, 0);
  EXPECT_EQ(warm.text, cold.text);
  ExpectOfSchema(cold.text);
}

// n > 1: one prefill, n forked continuations. Greedy: every choice is the n = 1 answer; sampled:
// choice 0 is the n = 1 answer with the same seed and the others differ; constrained: each choice
// is complete on its own.
TEST(Choices, ForkedChoicesAfterOnePrefill) {
  const Model m = Taylor(/*eos=*/-1);
  auto engine = StartEngine(m, Options());
  GenerateJob one = Job("", "Once upon a time", 12);
  Outcome single = SubmitAsync(*engine, one).get();
  ASSERT_TRUE(single.status.ok()) << single.status;
  GenerateJob three = one;
  three.n = 3;
  Outcome greedy = SubmitAsync(*engine, three).get();
  ASSERT_TRUE(greedy.status.ok()) << greedy.status;
  ASSERT_EQ(greedy.choice_text.size(), 3u);
  ASSERT_EQ(greedy.choice_reason.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(greedy.choice_text[i], single.text) << i;
    EXPECT_EQ(greedy.choice_reason[i], "length") << i;
  }
  EXPECT_EQ(greedy.usage.prompt_tokens, single.usage.prompt_tokens);  // prefilled once
  EXPECT_EQ(greedy.usage.completion_tokens, 3 * single.usage.completion_tokens);
  EXPECT_TRUE(greedy.text.empty());  // n > 1 reports through on_choice_output only

  one.sampling.temperature = 1.0f;
  one.sampling.seed = 5;
  Outcome sampled_one = SubmitAsync(*engine, one).get();
  GenerateJob four = one;
  four.n = 4;
  Outcome sampled = SubmitAsync(*engine, four).get();
  ASSERT_TRUE(sampled.status.ok()) << sampled.status;
  ASSERT_EQ(sampled.choice_text.size(), 4u);
  EXPECT_EQ(sampled.choice_text[0], sampled_one.text);
  EXPECT_NE(sampled.choice_text[1], sampled.choice_text[0]);
  EXPECT_NE(sampled.choice_text[2], sampled.choice_text[1]);
}

TEST(Choices, ConstrainedChoicesAreEachComplete) {
  const Model m = Taylor();
  auto schema = Compiled(m, {ConstraintSpec::Kind::kJsonSchema, kSchema});
  auto engine = StartEngine(m, Options());
  GenerateJob j = ConstrainedJob("JSON:", 200, 21, schema);
  j.n = 4;
  Outcome out = SubmitAsync(*engine, j).get();
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_EQ(out.choice_text.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out.choice_reason[i], "stop");
    ExpectOfSchema(out.choice_text[i]);
  }
}

TEST(Choices, NeedAnEphemeralSession) {
  const Model m = Taylor();
  auto engine = StartEngine(m, Options());
  ASSERT_TRUE(testing::Create(*engine, "s").ok());
  GenerateJob j = Job("s", "hello", 4);
  j.n = 2;
  Outcome out = SubmitAsync(*engine, j).get();
  EXPECT_EQ(out.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(out.status.message()).find("n:"), std::string::npos) << out.status;
}

}  // namespace
}  // namespace steady
