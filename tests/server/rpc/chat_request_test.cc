// Chat requests into prompts (server/rpc/service.h's JobFromRequest over model/text/chat_format.h):
// the Jinja and small formats, tools and tool calls reaching the template, the system-prompt boundary,
// and the refusals: invalid UTF-8 named by field and byte, messages on a session with a Jinja template,
// tools for a format that renders none, tool calls that are no JSON list.
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "server/rpc/service.h"

namespace steady {
namespace {

std::unique_ptr<ChatFormat> Jinja(const std::string& source) {
  JinjaChatSources s;
  s.source = source;
  s.where = "test template";
  s.bos_token = "<s>";
  auto f = MakeJinjaChatFormat(s);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *std::move(f) : nullptr;
}

// A template in Qwen's manner: tools in the system turn, calls as <tool_call> tags, tool results.
constexpr char kHermes[] =
    "{{ bos_token }}{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }} {{ c.function.arguments | tojson }}</tool_call>{% endfor %}"
    "{% if m.tool_call_id %}[{{ m.tool_call_id }}]{% endif %}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

v1::GenerateRequest Chat(std::initializer_list<std::pair<const char*, const char*>> messages) {
  v1::GenerateRequest r;
  for (const auto& [role, content] : messages) {
    v1::ChatMessage* m = r.add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  return r;
}

TEST(ChatRequestTest, JinjaTemplateRendersMessagesToolsAndToolCalls) {
  auto format = Jinja(kHermes);
  ASSERT_TRUE(format);
  EXPECT_EQ(format->tool_call_style(), ToolCallStyle::kHermes);
  EXPECT_FALSE(format->continues_sessions());
  v1::GenerateRequest r = Chat({{"system", "Be brief."}, {"user", "Weather?"}, {"assistant", ""}, {"tool", "12C"}});
  r.mutable_messages(2)->set_tool_calls_json(
      R"([{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}])");
  r.mutable_messages(3)->set_tool_call_id("c1");
  r.set_tools_json(R"([{"type": "function", "function": {"name": "weather", "parameters": {}}}])");
  auto job = JobFromRequest(r, EngineOptions(), ServiceOptions(), *format, GenerationDefaults());
  ASSERT_TRUE(job.ok()) << job.status();
  // The arguments, JSON text on the wire, reach the template as an object (tojson writes it back).
  EXPECT_EQ(job->prompt,
            "<s><tools>weather;</tools><system>Be brief.</system><user>Weather?</user>"
            "<assistant><tool_call>weather {\"city\": \"Oslo\"}</tool_call></assistant><tool>12C[c1]</tool><assistant>");
  // The system messages' own rendering is a prefix: the prefix cache keeps the state there.
  ASSERT_EQ(job->cache_at_bytes.size(), 1u);
  EXPECT_EQ(job->prompt.substr(0, job->cache_at_bytes[0]), "<s><tools>weather;</tools><system>Be brief.</system>");
  EXPECT_TRUE(job->stop.empty()) << "a Jinja template's turns end with the model's EOS, not stop strings";
}

TEST(ChatRequestTest, JinjaTemplateRefusesSessionsAndBadToolJson) {
  auto format = Jinja(kHermes);
  ASSERT_TRUE(format);
  v1::GenerateRequest r = Chat({{"user", "hi"}});
  r.set_session_id("s");
  auto job = JobFromRequest(r, EngineOptions(), ServiceOptions(), *format, GenerationDefaults());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("test template"), std::string::npos) << job.status();

  r.clear_session_id();
  r.mutable_messages(0)->set_tool_calls_json("{\"not\": \"a list\"}");
  job = JobFromRequest(r, EngineOptions(), ServiceOptions(), *format, GenerationDefaults());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("messages[0].tool_calls_json"), std::string::npos) << job.status();

  r.mutable_messages(0)->clear_tool_calls_json();
  r.set_tools_json("not json");
  job = JobFromRequest(r, EngineOptions(), ServiceOptions(), *format, GenerationDefaults());
  EXPECT_NE(job.status().message().find("tools_json"), std::string::npos) << job.status();
}

TEST(ChatRequestTest, TemplateErrorsNameTheLine) {
  auto format = Jinja("line one\n{{ raise_exception('no system here') if messages[0].role == 'system' }}");
  ASSERT_TRUE(format);
  auto job = JobFromRequest(Chat({{"system", "x"}}), EngineOptions(), ServiceOptions(), *format, GenerationDefaults());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("test template: line 2"), std::string::npos) << job.status();
  EXPECT_NE(job.status().message().find("no system here"), std::string::npos) << job.status();
}

TEST(ChatRequestTest, SmallFormatContinuesSessionsAndRefusesTools) {
  auto format = MakeSmallChatFormat(DefaultChatTemplate(), "config.json chat_template");
  EXPECT_TRUE(format->continues_sessions());
  EXPECT_EQ(format->tool_call_style(), ToolCallStyle::kNone);
  v1::GenerateRequest r = Chat({{"system", "S."}, {"user", "Hi"}});
  r.set_session_id("s");
  auto job = JobFromRequest(r, EngineOptions(), ServiceOptions(), *format, GenerationDefaults());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->prompt, "S.\n\nUser: Hi\nAssistant:");
  EXPECT_EQ(job->stop, DefaultChatTemplate().stop);

  r.set_tools_json(R"([{"type": "function", "function": {"name": "f"}}])");
  job = JobFromRequest(r, EngineOptions(), ServiceOptions(), *format, GenerationDefaults());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("renders no tools"), std::string::npos) << job.status();
}

TEST(ChatRequestTest, InvalidUtf8IsRefusedNamingTheFieldAndByte) {
  auto format = MakeSmallChatFormat(DefaultChatTemplate(), "config.json chat_template");
  v1::GenerateRequest r;
  r.set_prompt("ab\xc3(");
  auto job = JobFromRequest(r, EngineOptions(), ServiceOptions(), *format, GenerationDefaults());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(), "prompt: not valid UTF-8 (byte 2, 0xc3)");

  r = Chat({{"user", "fine"}, {"user", "caf\xc3\xa9 \xed\xa0\x80"}});  // a surrogate, encoded
  job = JobFromRequest(r, EngineOptions(), ServiceOptions(), *format, GenerationDefaults());
  EXPECT_EQ(job.status().message(), "messages[1].content: not valid UTF-8 (byte 6, 0xed)");

  r = Chat({{"user", "fine"}});
  r.add_stop("\xff");
  job = JobFromRequest(r, EngineOptions(), ServiceOptions(), *format, GenerationDefaults());
  EXPECT_EQ(job.status().message(), "stop[0]: not valid UTF-8 (byte 0, 0xff)");

  r = Chat({{"user", "truncated \xe2\x82"}});
  job = JobFromRequest(r, EngineOptions(), ServiceOptions(), *format, GenerationDefaults());
  EXPECT_EQ(job.status().message(), "messages[0].content: not valid UTF-8 (byte 10, 0xe2)");
  // U+FFFD itself is text like any other.
  r = Chat({{"user", "\xef\xbf\xbd ok"}});
  EXPECT_TRUE(JobFromRequest(r, EngineOptions(), ServiceOptions(), *format, GenerationDefaults()).ok());
}

}  // namespace
}  // namespace steady
