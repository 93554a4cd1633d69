// The gRPC service end to end (tests/server/rpc/service_fixture.h): streamed output against the
// single-session reference, sessions, export and import, chat, log-probabilities, cancellation,
// concurrency, model info, health, drain and metrics.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "tests/server/rpc/service_fixture.h"

namespace steady {
namespace {

TEST_F(ServiceTest, StreamedGreedyOutputEqualsTheCollectedReference) {
  const Streamed s = Generate(Request("", "This License applies to", 24));
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  const GenerateResult ref = Reference(*model_, *tokenizer_, "This License applies to", 24, {});
  EXPECT_EQ(s.text, ref.text);
  EXPECT_EQ(s.ids, ref.tokens);
  ASSERT_FALSE(s.messages.empty());
  for (size_t i = 0; i + 1 < s.messages.size(); ++i) {
    EXPECT_TRUE(s.messages[i].finish_reason().empty()) << "finish_reason before the last message";
    EXPECT_FALSE(s.messages[i].has_usage());
  }
  const v1::GenerateResponse& last = s.messages.back();
  EXPECT_EQ(last.finish_reason(), ref.finish_reason);
  EXPECT_EQ(last.usage().prompt_tokens(), ref.prompt_tokens);
  EXPECT_EQ(last.usage().completion_tokens(), int64_t(ref.tokens.size()));
  EXPECT_EQ(last.usage().session_position(), ref.prompt_tokens + int64_t(ref.tokens.size()));
}

// GenerateRequest.speculation: n-gram drafts verified per step, the text plain decoding's, the usage
// counting drafted and accepted tokens; an unknown mode is refused naming the field.
TEST_F(ServiceTest, SpeculativeOutputEqualsTheReference) {
  const std::string prompt = "This License applies to any program. This License applies to any program. This License";
  v1::GenerateRequest r = Request("", prompt, 32);
  r.mutable_speculation()->set_mode("ngram");
  r.mutable_speculation()->set_draft_tokens(4);
  const Streamed s = Generate(r);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  const GenerateResult ref = Reference(*model_, *tokenizer_, prompt, 32, {});
  EXPECT_EQ(s.text, ref.text);
  EXPECT_EQ(s.ids, ref.tokens);
  const v1::Usage& u = s.messages.back().usage();
  EXPECT_EQ(u.session_position(), ref.prompt_tokens + int64_t(ref.tokens.size()));
  EXPECT_GT(u.drafted_tokens(), 0);
  EXPECT_LE(u.accepted_tokens(), u.drafted_tokens());
  r.mutable_speculation()->set_mode("draft");
  const Streamed bad = Generate(r);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.status.error_message().find("speculation.mode"), std::string::npos) << bad.status.error_message();
}

TEST_F(ServiceTest, StreamedSampledOutputWithStopEqualsTheReference) {
  v1::GenerateRequest r = Request("", "The", 40);
  r.set_temperature(1.0f);
  r.set_top_k(50);
  r.set_top_p(0.9f);
  r.set_repetition_penalty(1.1f);
  r.set_seed(1234);
  // A stop string taken from the reference's own output, so it is certain to trigger.
  SamplingParams sampling{1.0f, 50, 0.9f, 1.1f, 1234};
  const GenerateResult free_run = Reference(*model_, *tokenizer_, "The", 40, sampling);
  // Two ASCII bytes from the second half (a stop string must be valid UTF-8).
  std::string stop;
  for (size_t i = free_run.text.size() / 2; i + 1 < free_run.text.size() && stop.empty(); ++i) {
    const unsigned char a = free_run.text[i], b = free_run.text[i + 1];
    if (a > 0x20 && a < 0x7f && b > 0x20 && b < 0x7f) stop = free_run.text.substr(i, 2);
  }
  ASSERT_FALSE(stop.empty()) << free_run.text;
  r.add_stop(stop);
  const Streamed s = Generate(r);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  const GenerateResult ref = Reference(*model_, *tokenizer_, "The", 40, sampling, {stop});
  EXPECT_EQ(s.text, ref.text);
  EXPECT_EQ(s.messages.back().finish_reason(), "stop");
  EXPECT_EQ(s.text.find(stop), std::string::npos);
  // Zero values mean "off": top_p 0 and repetition_penalty 0 are top_p 1 and penalty 1.
  v1::GenerateRequest zero = Request("", "The", 12);
  zero.set_temperature(0.8f);
  zero.set_seed(5);
  v1::GenerateRequest ones = zero;
  ones.set_top_p(1.0f);
  ones.set_repetition_penalty(1.0f);
  EXPECT_EQ(Generate(zero).ids, Generate(ones).ids);
}

TEST_F(ServiceTest, SessionsContinueForkAndDelete) {
  const v1::Session created = CreateSession("alpha");
  EXPECT_EQ(created.session_id(), "alpha");
  EXPECT_EQ(created.position(), 0);
  // Prefill only, then continue: the same as one call with the whole text.
  const Streamed prefill = Generate(Request("alpha", "This License applies", 0));
  ASSERT_TRUE(prefill.status.ok()) << prefill.status.error_message();
  EXPECT_TRUE(prefill.ids.empty());
  const int64_t position = prefill.messages.back().usage().session_position();
  EXPECT_GT(position, 0);
  v1::Session got;
  ASSERT_TRUE(GetSession("alpha", &got).ok());
  EXPECT_EQ(got.position(), position);
  EXPECT_GT(got.state_bytes(), 0);

  v1::Session forked;
  ASSERT_TRUE(Fork("", "alpha", "", &forked).ok());
  EXPECT_FALSE(forked.session_id().empty());
  EXPECT_NE(forked.session_id(), "alpha");
  EXPECT_EQ(forked.position(), position);

  const Streamed a = Generate(Request("alpha", " to", 16));
  const Streamed b = Generate(Request(forked.session_id(), " to", 16));
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.messages.back().usage().session_position(), position + a.messages.back().usage().prompt_tokens() +
                                                              int64_t(a.ids.size()));

  const std::vector<std::string> listed = List("");
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_LT(listed[0], listed[1]);  // ordered by id

  ASSERT_TRUE(Delete("", "alpha").ok());
  const grpc::Status gone = GetSession("alpha", &got);
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::NOT_FOUND) << gone.error_message();
  const Streamed after = Generate(Request("alpha", "x", 1));
  EXPECT_EQ(after.status.error_code(), grpc::StatusCode::NOT_FOUND) << after.status.error_message();
}

TEST_F(ServiceTest, ExportThenImportContinuesIdentically) {
  CreateSession("src");
  ASSERT_TRUE(Generate(Request("src", "Everyone is permitted to copy", 4)).status.ok());
  std::string blob;
  ASSERT_TRUE(Export("", "src", &blob).ok());
  EXPECT_GT(blob.size(), 1000u);  // several chunks
  v1::Session imported;
  const grpc::Status import = Import("", "copy", blob, &imported, 777);
  ASSERT_TRUE(import.ok()) << import.error_message();
  EXPECT_EQ(imported.session_id(), "copy");
  v1::Session src;
  ASSERT_TRUE(GetSession("src", &src).ok());
  EXPECT_EQ(imported.position(), src.position());
  const Streamed a = Generate(Request("src", " and distribute", 12));
  const Streamed b = Generate(Request("copy", " and distribute", 12));
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.ids, b.ids);

  // A corrupted snapshot is refused (the engine's snapshot checks name the problem), never imported.
  std::string bad = blob;
  bad[bad.size() / 2] ^= 0x5a;
  const grpc::Status s = Import("", "bad", bad);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_code(), grpc::StatusCode::UNKNOWN) << s.error_message();
  v1::Session none;
  EXPECT_EQ(GetSession("bad", &none).error_code(), grpc::StatusCode::NOT_FOUND);
}

// Chat messages are rendered with the model's template (here the default): the same output as the
// rendered text sent as a prompt, with the template's stop strings; prompt and messages together,
// or an unknown role, are refused naming the field.
TEST_F(ServiceTest, ChatMessagesAreRenderedWithTheTemplate) {
  v1::GenerateRequest chat = Request("", "", 12);
  auto* system = chat.add_messages();
  system->set_role("system");
  system->set_content("Be brief.");
  auto* user = chat.add_messages();
  user->set_role("user");
  user->set_content("This License");
  const Streamed a = Generate(chat);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  v1::GenerateRequest plain = Request("", "Be brief.\n\nUser: This License\nAssistant:", 12);
  plain.add_stop("\nUser:");
  const Streamed b = Generate(plain);
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.text, b.text);

  v1::GenerateRequest both = chat;
  both.set_prompt("x");
  const Streamed refused = Generate(both);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.status.error_message().find("messages: give prompt, prompt_token_ids or messages"),
            std::string::npos)
      << refused.status.error_message();
  v1::GenerateRequest unknown = Request("", "", 2);
  auto* tool = unknown.add_messages();
  tool->set_role("tool");
  tool->set_content("x");
  const Streamed refused_role = Generate(unknown);
  EXPECT_EQ(refused_role.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused_role.status.error_message().find("messages[0].role"), std::string::npos)
      << refused_role.status.error_message();
}

// Log-probabilities come one per streamed id, with the asked number of alternatives; the tokens'
// texts spell the streamed text. A token-id prompt gives what its text gives.
TEST_F(ServiceTest, LogprobsAndTokenIdPrompts) {
  v1::GenerateRequest r = Request("", "This License", 10);
  r.set_logprobs(true);
  r.set_top_logprobs(3);
  const Streamed s = Generate(r);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  std::string spelled;
  bool escaped = false;
  int logprobs = 0;
  for (const v1::GenerateResponse& m : s.messages) {
    ASSERT_EQ(m.logprobs_size(), m.token_ids_size());
    for (int i = 0; i < m.logprobs_size(); ++i) {
      const v1::TokenLogprob& l = m.logprobs(i);
      EXPECT_EQ(l.token_id(), m.token_ids(i));
      EXPECT_LE(l.logprob(), 0.0f);
      ASSERT_EQ(l.top_logprobs_size(), 3);
      EXPECT_EQ(l.top_logprobs(0).token_id(), l.token_id());  // greedy
      EXPECT_FLOAT_EQ(l.top_logprobs(0).logprob(), l.logprob());
      spelled += l.token();
      escaped = escaped || l.token().find("\\x") != std::string::npos;
      ++logprobs;
    }
  }
  EXPECT_EQ(logprobs, int(s.ids.size()));
  if (!escaped) EXPECT_EQ(spelled, s.text);

  auto ids = tokenizer_->Encode("This License");
  ASSERT_TRUE(ids.ok());
  v1::GenerateRequest by_ids = Request("", "", 10);
  by_ids.mutable_prompt_token_ids()->Add(ids->begin(), ids->end());
  const Streamed t = Generate(by_ids);
  ASSERT_TRUE(t.status.ok()) << t.status.error_message();
  EXPECT_EQ(t.ids, s.ids);
  EXPECT_EQ(t.text, s.text);
}

TEST_F(ServiceTest, CancelAndDeadlineEndTheJobAndKeepTheSessionUsable) {
  CreateSession("long");
  {
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, Request("long", "The", 60000));
    v1::GenerateResponse m;
    ASSERT_TRUE(reader->Read(&m));
    context.TryCancel();
    while (reader->Read(&m)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  const int64_t after_cancel = WaitIdle("long").position();
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    auto reader = stub_->Generate(&context, Request("long", "The", 60000));
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // The engine ends the job within one step; the session is then free again and consistent.
  const v1::Session s = WaitIdle("long");
  EXPECT_GE(s.position(), after_cancel);
  EXPECT_GT(after_cancel, 1);  // the first call streamed a token before its cancel: it is in the state
  const Streamed next = Generate(Request("long", " again", 3));
  ASSERT_TRUE(next.status.ok()) << next.status.error_message();
  const v1::Usage& usage = next.messages.back().usage();
  EXPECT_EQ(usage.session_position(), s.position() + usage.prompt_tokens() + usage.completion_tokens());
}

TEST_F(ServiceTest, ConcurrentStreamsEachEqualTheirReference) {
  const std::vector<std::string> prompts = {"This", "You may", "The licenses for most software", "Copyright"};
  std::vector<std::future<Streamed>> running;
  for (const std::string& p : prompts) {
    running.push_back(std::async(std::launch::async, [this, p] { return Generate(Request("", p, 20)); }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Streamed s = running[i].get();
    ASSERT_TRUE(s.status.ok()) << s.status.error_message();
    EXPECT_EQ(s.ids, Reference(*model_, *tokenizer_, prompts[i], 20, {}).tokens) << prompts[i];
  }
}

TEST_F(ServiceTest, ModelInfoDescribesTheServedModel) {
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(As("").get(), {}, &info).ok());
  EXPECT_EQ(info.model_name(), "tiny-taylor");
  EXPECT_EQ(info.mechanism(), "taylor");
  ASSERT_EQ(info.layers_size(), 2);
  EXPECT_NE(info.layers(0).params_json().find("\"order\":2"), std::string::npos) << info.layers(0).params_json();
  EXPECT_EQ(info.vocab_size(), 512);
  EXPECT_EQ(info.state_bytes_per_session(), int64_t(model_->StateFloats() * sizeof(float)));
  EXPECT_EQ(info.kv_cache_bytes_per_token(), 0);
  EXPECT_EQ(info.limits().max_new_tokens(), EngineOptions{}.max_new_tokens);
  EXPECT_GT(info.limits().max_stop_strings(), 0);
}

TEST_F(ServiceTest, HealthCheckServes) {
  // grpc.health.v1.Health/Check with an empty request; the response's field 1 is the status.
  grpc::GenericStub stub(channel_);
  grpc::ClientContext context;
  grpc::Slice empty;
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status status = done.get_future().get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING
}

TEST_F(ServiceTest, DrainRefusesNewCallsWithUnavailable) {
  service_->BeginDrain();
  v1::Session s;
  EXPECT_EQ(GetSession("any", &s).error_code(), grpc::StatusCode::UNAVAILABLE);
  const Streamed g = Generate(Request("", "x", 2));
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

// A blocking HTTP GET against the metrics endpoint; returns the whole response.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  (void)!write(fd, request.data(), request.size());
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, size_t(n));
  close(fd);
  return response;
}

TEST_F(ServiceTest, MetricsCountRequestsTokensAndLatencies) {
  ASSERT_TRUE(Generate(Request("", "The", 5)).status.ok());
  Generate(Request("", "The", -1));
  Engine* engine = engine_.get();
  Metrics* metrics = metrics_.get();
  auto http = MetricsHttpServer::Start("127.0.0.1", 0, [engine, metrics] { return metrics->Render(engine->stats()); });
  ASSERT_TRUE(http.ok()) << http.status();
  // The engine adds a step's token counts after the step's callbacks: poll briefly for them.
  std::string page;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    page = HttpGet((*http)->port(), "/metrics");
    if (page.find("steady_generated_tokens_total 5\n") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < give_up);
  EXPECT_EQ(page.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << page;
  for (const char* needle :
       {"steady_requests_total{rpc=\"Generate\",code=\"OK\"} 1\n",
        "steady_requests_total{rpc=\"Generate\",code=\"INVALID_ARGUMENT\"} 1\n",
        "steady_time_to_first_token_seconds_count 1\n", "steady_inter_token_latency_seconds_count 4\n",
        "steady_inter_token_latency_seconds_bucket{le=\"+Inf\"} 4\n", "# TYPE steady_queue_depth gauge\n",
        "steady_sessions{state=\"resident\"}", "steady_sessions{state=\"offloaded\"}", "steady_state_bytes ",
        "steady_engine_step_seconds ", "steady_generated_tokens_total 5\n"}) {
    EXPECT_NE(page.find(needle), std::string::npos) << "missing " << needle << " in\n" << page;
  }
  EXPECT_EQ(HttpGet((*http)->port(), "/other").rfind("HTTP/1.1 404", 0), 0u);
}

TEST(StatusMapping, EveryCodeMapsOneToOneKeepingTheMessage) {
  for (int code = 1; code <= 16; ++code) {
    const grpc::Status g = ToGrpcStatus(absl::Status(absl::StatusCode(code), "field: reason"));
    EXPECT_EQ(int(g.error_code()), code);
    EXPECT_EQ(g.error_message(), "field: reason");
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace steady
