// Hugging Face architecture keys of config.json (model/checkpoint/hf_config.cc) and
// generation_config.json: what each model_type implies, rope_scaling, the window layers, and the
// refusals that name the file and the key.
#include <cmath>

#include <gtest/gtest.h>

#include "model/checkpoint/config.h"

namespace steady {
namespace {

nlohmann::json Base(const char* model_type) {
  return {{"model_type", model_type},  {"vocab_size", 100},        {"hidden_size", 64},
          {"intermediate_size", 128}, {"num_hidden_layers", 4},   {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-6},     {"rope_theta", 10000.0},
          {"max_position_embeddings", 4096}, {"bos_token_id", 1}, {"eos_token_id", 2}};
}

TEST(HfConfigTest, ModelTypeImpliesBiasesAndQkNorm) {
  auto qwen2 = ParseModelConfig(Base("qwen2").dump(), "config.json");
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  EXPECT_TRUE(qwen2->qkv_bias);
  EXPECT_FALSE(qwen2->o_bias);
  EXPECT_FALSE(qwen2->qk_norm);
  auto qwen3 = ParseModelConfig(Base("qwen3").dump(), "config.json");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_FALSE(qwen3->qkv_bias);
  nlohmann::json llama = Base("llama");
  llama["attention_bias"] = true;
  llama["mlp_bias"] = true;
  auto l = ParseModelConfig(llama.dump(), "config.json");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->qkv_bias && l->o_bias && l->mlp_bias);
  // Mistral's modeling code reads neither key.
  nlohmann::json mistral = Base("mistral");
  mistral["attention_bias"] = true;
  auto m = ParseModelConfig(mistral.dump(), "config.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->qkv_bias || m->o_bias || m->mlp_bias);
  // A saved config reads back the same.
  auto again = ParseModelConfig(l->ToJson().dump(), "again.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->qkv_bias && again->o_bias && again->mlp_bias);
}

TEST(HfConfigTest, RopeScalingTypes) {
  nlohmann::json j = Base("llama");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  auto c = ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, "llama3");
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  auto again = ParseModelConfig(c->ToJson().dump(), "again.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rope_scaling.type, "llama3");
  // Older configs say "type"; dynamic's threshold defaults to max_position_embeddings.
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  c = ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, "dynamic");
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 4096);
  // yarn's attention factor: 0.1 ln(factor) + 1 unless given.
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1024}};
  c = ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR(c->rope_scaling.attention_factor, 0.1 * std::log(4.0) + 1, 1e-12);
  // Qwen's recipes: original_max_position_embeddings equal to max_position_embeddings (Qwen2.5), or
  // below it at another ratio than factor (Qwen3: 32768 of 40960, factor 4); Hugging Face uses factor.
  for (int64_t original : {4096, 3276}) {
    j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", original}};
    c = ParseModelConfig(j.dump(), "config.json");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->rope_scaling.factor, 4.0);
  }
  // No RoPE scaling key at all: Hugging Face's default theta.
  nlohmann::json plain = Base("llama");
  plain.erase("rope_theta");
  c = ParseModelConfig(plain.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
}

TEST(HfConfigTest, WindowsSelectTheSlidingWindowMechanism) {
  nlohmann::json mistral = Base("mistral");
  mistral["sliding_window"] = 8;
  auto m = ParseModelConfig(mistral.dump(), "config.json");
  ASSERT_TRUE(m.ok()) << m.status();
  for (const AttentionConfig& a : m->layer_attention) {
    EXPECT_EQ(a.mechanism, "sliding_window");
    EXPECT_EQ(a.params["window"], 8);
  }
  mistral["sliding_window"] = nullptr;  // Mistral v0.2 and later: no window
  m = ParseModelConfig(mistral.dump(), "config.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->layer_attention[0].mechanism, "softmax");
  // Qwen2: only with use_sliding_window, on the layers from max_window_layers on.
  nlohmann::json qwen = Base("qwen2");
  qwen["sliding_window"] = 16;
  qwen["max_window_layers"] = 2;
  auto q = ParseModelConfig(qwen.dump(), "config.json");
  ASSERT_TRUE(q.ok()) << q.status();
  for (const AttentionConfig& a : q->layer_attention) EXPECT_EQ(a.mechanism, "softmax");
  qwen["use_sliding_window"] = true;
  q = ParseModelConfig(qwen.dump(), "config.json");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->layer_attention[1].mechanism, "softmax");
  EXPECT_EQ(q->layer_attention[2].mechanism, "sliding_window");
  EXPECT_EQ(q->layer_attention[3].params["window"], 16);
  auto again = ParseModelConfig(q->ToJson().dump(), "again.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->layer_attention[2].mechanism, "sliding_window");
  EXPECT_EQ(again->layer_attention[1].mechanism, "softmax");
}

TEST(HfConfigTest, RefusalsNameFileAndKey) {
  struct Case {
    const char* type;
    const char* patch;
    const char* needle;
  } cases[] = {
      {"llama", R"({"model_type": "gpt2"})", "model_type \"gpt2\""},
      {"llama", R"({"hidden_act": "gelu"})", "hidden_act"},
      {"llama", R"({"rope_scaling": {"rope_type": "longrope", "factor": 2}})", "longrope"},
      {"llama", R"({"rope_scaling": {"rope_type": "llama3", "factor": 8}})", "original_max_position_embeddings"},
      {"llama", R"({"rope_scaling": {"type": "linear"}})", "factor"},
      {"llama", R"({"rope_scaling": {"type": "linear", "factor": 2, "frobnicate": 1}})", "frobnicate"},
      {"llama", R"({"quantization_config": {"bits": 4}})", "quantization_config"},
      {"llama", R"({"partial_rotary_factor": 0.5})", "partial_rotary_factor"},
      {"mistral", R"({"sliding_window": 0})", "sliding_window"},
      {"qwen2", R"({"use_sliding_window": true, "sliding_window": 0})", "sliding_window"},
      {"qwen2", R"({"layer_types": ["full_attention"]})", "layer_types"},
      // yarn's inconsistent values (Hugging Face warns and computes something else than meant).
      {"qwen2", R"({"rope_scaling": {"type": "yarn", "factor": 0.5, "original_max_position_embeddings": 1024}})",
       "rope_scaling.factor"},
      {"qwen2", R"({"rope_scaling": {"type": "yarn", "factor": 4, "beta_fast": 2, "beta_slow": 8}})",
       "rope_scaling.beta_fast 2 must not be below rope_scaling.beta_slow 8"},
      {"qwen2", R"({"rope_scaling": {"type": "yarn", "factor": 4, "beta_fast": 0.5}})", "rope_scaling.beta_fast"},
      {"qwen2", R"({"rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 8192}})",
       "rope_scaling.original_max_position_embeddings 8192 is above max_position_embeddings 4096"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = Base(c.type);
    j.merge_patch(nlohmann::json::parse(c.patch));
    auto r = ParseModelConfig(j.dump(), "dir/config.json");
    ASSERT_FALSE(r.ok()) << c.patch;
    EXPECT_NE(std::string(r.status().message()).find("dir/config.json"), std::string::npos) << r.status();
    EXPECT_NE(std::string(r.status().message()).find(c.needle), std::string::npos) << r.status();
  }
}

TEST(HfConfigTest, GenerationConfigDefaults) {
  auto c = ParseModelConfig(Base("llama").dump(), "config.json");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(ParseGenerationConfig(
                  R"({"eos_token_id": [2, 7], "do_sample": true, "temperature": 0.6, "top_p": 0.9, "max_length": 9})",
                  "generation_config.json", &*c)
                  .ok());
  EXPECT_TRUE(c->IsEos(7));
  EXPECT_EQ(c->eos_token_id, 2);
  EXPECT_FLOAT_EQ(*c->generation.temperature, 0.6f);
  EXPECT_FLOAT_EQ(*c->generation.top_p, 0.9f);
  EXPECT_EQ(*c->generation.top_k, 50);  // Hugging Face's default with do_sample
  // Greedy without do_sample, whatever the temperature says.
  auto greedy = ParseModelConfig(Base("llama").dump(), "config.json");
  ASSERT_TRUE(ParseGenerationConfig(R"({"temperature": 0.6})", "g.json", &*greedy).ok());
  EXPECT_FALSE(greedy->generation.temperature.has_value());
  // Refused, naming the file and key, and nothing changes.
  const ModelConfig before = *c;
  absl::Status s = ParseGenerationConfig(R"({"eos_token_id": 100})", "dir/generation_config.json", &*c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("dir/generation_config.json"), std::string::npos) << s;
  EXPECT_EQ(c->eos_token_ids, before.eos_token_ids);
  s = ParseGenerationConfig(R"({"top_p": 2})", "g.json", &*c);
  EXPECT_NE(std::string(s.message()).find("top_p"), std::string::npos) << s;
}

}  // namespace
}  // namespace steady
