// GenerateRequest's sampling fields with presence (server/rpc/request_sampling.cc): a field left out
// takes the checkpoint's generation_config.json default, a field that is set (0 included) is that
// value; the final message reports the values used; ModelInfo lists the defaults. Unit cases on
// SamplingFromRequest, then the real server over a model whose config has a generation_config.json.
#include <string>

#include <gtest/gtest.h>

#include "model/checkpoint/config.h"
#include "nlohmann/json.hpp"
#include "tests/server/rpc/service_fixture.h"
#include "tests/testutil.h"

namespace steady {
namespace {

// As a checkpoint ships it: sampling on, every default set.
constexpr char kGenerationConfig[] = R"({"do_sample": true, "temperature": 0.7, "top_k": 3, "top_p": 0.9,
                                         "repetition_penalty": 1.05, "max_new_tokens": 6, "eos_token_id": 2})";

GenerationDefaults Defaults() {
  ModelConfig c = testing::TinyConfig("taylor", {{"order", 2}});
  EXPECT_TRUE(ParseGenerationConfig(kGenerationConfig, "generation_config.json", &c).ok());
  return c.generation;
}

TEST(SamplingFromRequestTest, AbsentFieldsTakeTheCheckpointsDefaults) {
  GenerateJob job;
  ASSERT_TRUE(SamplingFromRequest(v1::GenerateRequest(), Defaults(), 64, &job).ok());
  EXPECT_EQ(job.max_tokens, 6);
  EXPECT_FLOAT_EQ(job.sampling.temperature, 0.7f);
  EXPECT_EQ(job.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(job.sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(job.sampling.repetition_penalty, 1.05f);
  // A default above the server's --max-new-tokens is held to it (the caller did not ask for it).
  GenerateJob limited;
  ASSERT_TRUE(SamplingFromRequest(v1::GenerateRequest(), Defaults(), 4, &limited).ok());
  EXPECT_EQ(limited.max_tokens, 4);
}

TEST(SamplingFromRequestTest, ExplicitZerosAreZerosAndOffNotTheDefaults) {
  v1::GenerateRequest r;
  r.set_max_tokens(0);
  r.set_temperature(0);
  r.set_top_k(0);
  r.set_top_p(0);
  r.set_repetition_penalty(0);
  GenerateJob job;
  ASSERT_TRUE(SamplingFromRequest(r, Defaults(), 64, &job).ok());
  EXPECT_EQ(job.max_tokens, 0);
  EXPECT_EQ(job.sampling.temperature, 0.0f);
  EXPECT_EQ(job.sampling.top_k, 0);
  EXPECT_EQ(job.sampling.top_p, 1.0f);               // 0: off
  EXPECT_EQ(job.sampling.repetition_penalty, 1.0f);  // 0: off
  // Set values win over the defaults; without defaults the server's own apply.
  r.set_temperature(1.5f);
  r.set_top_p(0.5f);
  ASSERT_TRUE(SamplingFromRequest(r, Defaults(), 64, &job).ok());
  EXPECT_EQ(job.sampling.temperature, 1.5f);
  EXPECT_EQ(job.sampling.top_p, 0.5f);
  GenerateJob plain;
  ASSERT_TRUE(SamplingFromRequest(v1::GenerateRequest(), GenerationDefaults(), 64, &plain).ok());
  EXPECT_EQ(plain.max_tokens, 0);
  EXPECT_EQ(plain.sampling.temperature, 0.0f);
  EXPECT_EQ(plain.sampling.top_k, 0);
  EXPECT_EQ(plain.sampling.top_p, 1.0f);
  EXPECT_EQ(plain.sampling.repetition_penalty, 1.0f);
}

TEST(SamplingFromRequestTest, SetValuesAreCheckedNamingTheField) {
  struct Case {
    const char* field;
    void (*set)(v1::GenerateRequest*);
  } cases[] = {
      {"max_tokens", [](v1::GenerateRequest* r) { r->set_max_tokens(65); }},
      {"temperature", [](v1::GenerateRequest* r) { r->set_temperature(-1); }},
      {"top_k", [](v1::GenerateRequest* r) { r->set_top_k(-1); }},
      {"top_p", [](v1::GenerateRequest* r) { r->set_top_p(1.5f); }},
      {"repetition_penalty", [](v1::GenerateRequest* r) { r->set_repetition_penalty(-2); }},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest r;
    c.set(&r);
    GenerateJob job;
    absl::Status s = SamplingFromRequest(r, Defaults(), 64, &job);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(std::string(s.message()).rfind(c.field, 0) == 0) << s;
  }
}

// The real server over a model whose config carries kGenerationConfig.
class GenerationDefaultsTest : public ServiceTest {
 protected:
  static void SetUpTestSuite() {
    ModelConfig c = testing::TinyConfig("taylor", {{"order", 2}});
    ASSERT_TRUE(ParseGenerationConfig(kGenerationConfig, "generation_config.json", &c).ok());
    auto model = Model::Random(c, 42);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = new Model(*std::move(model));
    auto tokenizer = Tokenizer::Load(testing::SourcePath("tests/data/tokenizer/tokenizer.model"));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
  }
};

TEST_F(GenerationDefaultsTest, ARequestWithoutSamplingFieldsSamplesWithTheCheckpointsDefaults) {
  v1::GenerateRequest r;
  r.set_prompt("The");
  r.set_seed(11);
  const Streamed s = Generate(r);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  const v1::Sampling& used = s.messages.back().sampling();
  EXPECT_EQ(used.max_tokens(), 6);
  EXPECT_FLOAT_EQ(used.temperature(), 0.7f);
  EXPECT_EQ(used.top_k(), 3);
  EXPECT_FLOAT_EQ(used.top_p(), 0.9f);
  EXPECT_FLOAT_EQ(used.repetition_penalty(), 1.05f);
  const GenerateResult ref = Reference(*model_, *tokenizer_, "The", 6, SamplingParams{0.7f, 3, 0.9f, 1.05f, 11});
  EXPECT_EQ(s.ids, ref.tokens);
  // Which the server's own defaults (greedy, max_tokens 0) would not have given.
  ASSERT_NE(ref.tokens, Reference(*model_, *tokenizer_, "The", 6, {}).tokens);
}

TEST_F(GenerationDefaultsTest, SetFieldsOverrideTheDefaultsAndZeroMeansZero) {
  v1::GenerateRequest r;
  r.set_prompt("The");
  r.set_max_tokens(5);
  r.set_temperature(0);
  r.set_top_k(0);
  r.set_top_p(0);
  r.set_repetition_penalty(0);
  const Streamed s = Generate(r);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  const v1::Sampling& used = s.messages.back().sampling();
  EXPECT_EQ(used.max_tokens(), 5);
  EXPECT_EQ(used.temperature(), 0.0f);
  EXPECT_EQ(used.top_k(), 0);
  EXPECT_EQ(used.top_p(), 1.0f);
  EXPECT_EQ(used.repetition_penalty(), 1.0f);
  EXPECT_EQ(s.ids, Reference(*model_, *tokenizer_, "The", 5, {}).tokens);  // greedy
  // max_tokens 0, set: prefill only, not the default 6.
  r.set_max_tokens(0);
  const Streamed prefill = Generate(r);
  ASSERT_TRUE(prefill.status.ok()) << prefill.status.error_message();
  EXPECT_TRUE(prefill.ids.empty());
}

TEST_F(GenerationDefaultsTest, ModelInfoListsTheDefaults) {
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(As("").get(), {}, &info).ok());
  const nlohmann::json j = nlohmann::json::parse(info.generation_defaults_json());
  EXPECT_EQ(j.size(), 5u) << j;
  EXPECT_EQ(j.value("max_tokens", 0), 6);
  EXPECT_EQ(j.value("top_k", 0), 3);
  EXPECT_NEAR(j.value("temperature", 0.0), 0.7, 1e-6);
}

}  // namespace
}  // namespace steady
