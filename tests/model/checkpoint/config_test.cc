#include "model/checkpoint/config.h"

#include <gtest/gtest.h>

namespace steady {
namespace {

constexpr char kLlama[] = R"({
  "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
  "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2
})";

TEST(ConfigTest, PlainLlamaConfigIsSoftmax) {
  auto c = ParseModelConfig(kLlama, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  ASSERT_EQ(c->layer_attention.size(), 3u);
  for (const auto& a : c->layer_attention) EXPECT_EQ(a.mechanism, "softmax");
}

TEST(ConfigTest, AttentionWithPerLayerOverride) {
  nlohmann::json j = nlohmann::json::parse(kLlama);
  j["attention"] = {{"mechanism", "taylor"}, {"order", 3}, {"layers", {{"2", {{"mechanism", "softmax"}}}}}};
  auto c = ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->layer_attention[0].mechanism, "taylor");
  EXPECT_EQ(c->layer_attention[0].params["order"], 3);
  EXPECT_EQ(c->layer_attention[2].mechanism, "softmax");
  EXPECT_FALSE(c->layer_attention[2].params.contains("order"));
  // Round trip through ToJson.
  auto again = ParseModelConfig(c->ToJson().dump(), "again.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->layer_attention[2].mechanism, "softmax");
  EXPECT_EQ(again->layer_attention[1].params["order"], 3);
}

TEST(ConfigTest, RefusalsNameFileAndKey) {
  struct Case {
    const char* patch;
    const char* needle;
  } cases[] = {
      {R"({"hidden_size": null})", "hidden_size"},
      {R"({"num_key_value_heads": 3})", "num_key_value_heads"},
      {R"({"rms_norm_eps": "x"})", "rms_norm_eps"},
      {R"({"vocab_size": -5})", "vocab_size"},
      {R"({"eos_token_id": 100})", "special token id 100"},
      {R"({"attention": {"mechanism": 7}})", "attention.mechanism"},
      {R"({"attention": {"layers": {"9": {}}}})", "attention.layers"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = nlohmann::json::parse(kLlama);
    j.merge_patch(nlohmann::json::parse(c.patch));
    auto r = ParseModelConfig(j.dump(), "dir/config.json");
    ASSERT_FALSE(r.ok()) << c.patch;
    EXPECT_NE(std::string(r.status().message()).find("dir/config.json"), std::string::npos) << r.status();
    EXPECT_NE(std::string(r.status().message()).find(c.needle), std::string::npos) << r.status();
  }
  EXPECT_FALSE(ParseModelConfig("{not json", "x").ok());
}

TEST(ConfigTest, EosTokenIdMayBeAList) {
  nlohmann::json j = nlohmann::json::parse(kLlama);
  j["eos_token_id"] = {2, 7};
  auto c = ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->eos_token_id, 2);
  EXPECT_TRUE(c->IsEos(2));
  EXPECT_TRUE(c->IsEos(7));
  EXPECT_FALSE(c->IsEos(3));
  auto again = ParseModelConfig(c->ToJson().dump(), "again.json");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->eos_token_ids, (std::vector<int>{2, 7}));
  j["eos_token_id"] = {2, 100};
  auto bad = ParseModelConfig(j.dump(), "config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("100"), std::string::npos);
  j["eos_token_id"] = {2, "x"};
  EXPECT_FALSE(ParseModelConfig(j.dump(), "config.json").ok());
}

TEST(ConfigTest, OverrideKeepsScale) {
  nlohmann::json j = nlohmann::json::parse(kLlama);
  j["attention"] = {{"mechanism", "softmax"}, {"scale", 0.5}};
  auto c = ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok());
  OverrideMechanism("taylor", {{"order", 5}}, &*c);
  EXPECT_EQ(c->layer_attention[1].mechanism, "taylor");
  EXPECT_EQ(c->layer_attention[1].params["order"], 5);
  EXPECT_EQ(c->layer_attention[1].params["scale"], 0.5);
}

// config.json's chat template: parsed, written back, rendered; the default when absent.
TEST(ChatTemplateTest, ParsedRenderedAndDefaulted) {
  auto plain = ParseModelConfig(kLlama, "config.json");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->has_chat_template);
  EXPECT_EQ(plain->chat_template, DefaultChatTemplate());
  EXPECT_FALSE(plain->ToJson().contains("chat_template")) << "the default is not written (nor fingerprinted)";
  auto rendered = RenderChat(DefaultChatTemplate(), {{"system", "Be brief."}, {"user", "Hi"}}, true);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(*rendered, "Be brief.\n\nUser: Hi\nAssistant:");
  size_t system_bytes = 99;  // the leading system messages' text: where prompts sharing them part
  ASSERT_TRUE(RenderChat(DefaultChatTemplate(), {{"system", "A."}, {"system", "B."}, {"user", "Hi"}, {"system", "C."}},
                         true, &system_bytes)
                  .ok());
  EXPECT_EQ(system_bytes, std::string("A.\nB.\n").size());
  ASSERT_TRUE(RenderChat(DefaultChatTemplate(), {{"user", "Hi"}}, true, &system_bytes).ok());
  EXPECT_EQ(system_bytes, 0u);

  nlohmann::json j = nlohmann::json::parse(kLlama);
  j["chat_template"] = {{"user", "<u>{content}</u>"}, {"assistant", "<a>{content}</a>"}, {"generation_prompt", "<a>"},
                        {"stop", {"</a>"}}};
  auto c = ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->has_chat_template);
  EXPECT_EQ(c->chat_template.stop, std::vector<std::string>{"</a>"});
  auto turn = RenderChat(c->chat_template, {{"user", "x"}, {"assistant", "y"}, {"user", "z"}}, true);
  ASSERT_TRUE(turn.ok());
  EXPECT_EQ(*turn, "<u>x</u><a>y</a><u>z</u><a>");
  EXPECT_EQ(RenderChat(c->chat_template, {{"system", "s"}}, false).status().code(), absl::StatusCode::kInvalidArgument);
  auto again = ParseModelConfig(c->ToJson().dump(), "again.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->chat_template, c->chat_template);

  for (const nlohmann::json& bad : {nlohmann::json{{"user", "no placeholder"}}, nlohmann::json{{"user", 3}},
                                    nlohmann::json{{"user", "{content}{content}"}}, nlohmann::json{{"stop", "x"}},
                                    nlohmann::json::array()}) {
    nlohmann::json k = nlohmann::json::parse(kLlama);
    k["chat_template"] = bad;
    auto refused = ParseModelConfig(k.dump(), "config.json");
    EXPECT_FALSE(refused.ok()) << bad.dump();
    if (!refused.ok()) EXPECT_NE(std::string(refused.status().message()).find("chat_template"), std::string::npos);
  }
}

}  // namespace
}  // namespace steady
