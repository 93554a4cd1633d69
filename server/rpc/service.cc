#include "server/rpc/service.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "base/status.h"
#include "base/utf8.h"
#include "model/constrain/token_bytes.h"
#include "server/store/snapshot.h"
#include "server/store/snapshot_signing.h"

namespace steady {

// The numeric values are the same canonical codes on both sides.
static_assert(int(absl::StatusCode::kInvalidArgument) == int(grpc::StatusCode::INVALID_ARGUMENT));
static_assert(int(absl::StatusCode::kUnauthenticated) == int(grpc::StatusCode::UNAUTHENTICATED));
static_assert(int(absl::StatusCode::kDataLoss) == int(grpc::StatusCode::DATA_LOSS));

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status ValidateSessionId(const std::string& field, const std::string& id, bool allow_empty) {
  if (id.empty()) {
    return allow_empty ? absl::OkStatus() : absl::InvalidArgumentError(absl::StrCat(field, ": must not be empty"));
  }
  if (id.size() > size_t(kMaxSessionIdBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": longer than ", kMaxSessionIdBytes, " bytes"));
  }
  bool ok = id[0] != '.';
  for (char c : id) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                c == '-' || c == '.');
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", absl::CHexEscape(id), "\" is not [A-Za-z0-9_.-] (not starting with '.')"));
  }
  return absl::OkStatus();
}

absl::Status CheckUtf8(const std::string& field, std::string_view text) {
  for (size_t at = 0; at < text.size();) {
    size_t length = 0;
    if (DecodeUtf8At(text, at, &length) == kReplacementChar && length == 1) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: not valid UTF-8 (byte %u, 0x%02x)", field, at,
                                                        static_cast<unsigned char>(text[at])));
    }
    at += length;
  }
  return absl::OkStatus();
}

namespace {

// The request's messages (and tools) as the chat format takes them; INVALID_ARGUMENT naming the field
// for text that is not UTF-8 or JSON that does not parse.
absl::StatusOr<ChatInput> ChatInputFromRequest(const v1::GenerateRequest& r) {
  using Json = nlohmann::ordered_json;
  ChatInput input;
  for (int i = 0; i < r.messages_size(); ++i) {
    const v1::ChatMessage& m = r.messages(i);
    const std::string where = absl::StrCat("messages[", i, "]");
    const std::pair<const char*, const std::string*> fields[] = {
        {"role", &m.role()}, {"content", &m.content()}, {"tool_calls_json", &m.tool_calls_json()},
        {"tool_call_id", &m.tool_call_id()}, {"name", &m.name()}};
    for (const auto& [name, text] : fields) {
      if (absl::Status s = CheckUtf8(absl::StrCat(where, ".", name), *text); !s.ok()) return s;
    }
    Json message = {{"role", m.role()}, {"content", m.content()}};
    if (!m.tool_calls_json().empty()) {
      Json calls = Json::parse(m.tool_calls_json(), nullptr, /*allow_exceptions=*/false);
      if (!calls.is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".tool_calls_json: expected a JSON list of tool calls"));
      }
      // OpenAI sends arguments as JSON text; the templates (as transformers gives them) read an object.
      for (Json& call : calls) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        Json& arguments = call["function"]["arguments"];
        if (!arguments.is_string()) continue;
        Json parsed = Json::parse(arguments.get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (!parsed.is_discarded()) arguments = std::move(parsed);
      }
      message["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id().empty()) message["tool_call_id"] = m.tool_call_id();
    if (!m.name().empty()) message["name"] = m.name();
    input.messages.push_back(std::move(message));
  }
  if (!r.tools_json().empty()) {
    if (absl::Status s = CheckUtf8("tools_json", r.tools_json()); !s.ok()) return s;
    input.tools = Json::parse(r.tools_json(), nullptr, /*allow_exceptions=*/false);
    if (!input.tools.is_array()) return absl::InvalidArgumentError("tools_json: expected a JSON list of tools");
  }
  return input;
}

}  // namespace

uint64_t RequestFingerprint(const v1::GenerateRequest& request) {
  v1::GenerateRequest r = request;
  // Neither changes the output: a resend may add expected_position.
  r.clear_expected_position();
  r.clear_all_or_nothing();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);  // map entries (logit_bias) in key order
    r.SerializeToCodedStream(&coded);
  }
  return Hash64(bytes, /*seed=*/0x7475726eull) | 1;  // never 0 ("no fingerprint")
}

absl::StatusOr<GenerateJob> JobFromRequest(const v1::GenerateRequest& r, const EngineOptions& engine,
                                           const ServiceOptions& options, const ChatFormat& chat,
                                           const GenerationDefaults& defaults) {
  if (absl::Status s = ValidateSessionId("session_id", r.session_id(), /*allow_empty=*/true); !s.ok()) return s;
  if (absl::Status s = CheckUtf8("prompt", r.prompt()); !s.ok()) return s;
  if (r.stop_size() > options.max_stop_strings) {
    return absl::InvalidArgumentError(
        absl::StrCat("stop: at most ", options.max_stop_strings, " strings, got ", r.stop_size()));
  }
  for (int i = 0; i < r.stop_size(); ++i) {
    if (r.stop(i).empty()) return absl::InvalidArgumentError(absl::StrCat("stop[", i, "]: must not be empty"));
    if (absl::Status s = CheckUtf8(absl::StrCat("stop[", i, "]"), r.stop(i)); !s.ok()) return s;
    if (int64_t(r.stop(i).size()) > options.max_stop_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "]: longer than ", options.max_stop_bytes, " bytes"));
    }
  }
  GenerateJob job;
  job.session_id = r.session_id();
  job.prompt = r.prompt();
  job.prompt_token_ids.assign(r.prompt_token_ids().begin(), r.prompt_token_ids().end());
  if (r.messages_size() > 0) {
    if (!r.prompt().empty() || r.prompt_token_ids_size() > 0) {
      return absl::InvalidArgumentError("messages: give prompt, prompt_token_ids or messages, only one");
    }
    if (!r.session_id().empty() && !chat.continues_sessions()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "messages: the model's chat template (", chat.source(),
          ") renders whole conversations, so a session cannot take its messages turn by turn; send the whole "
          "conversation without session_id (the prefix cache keeps a resent history cheap), or a prompt to the session"));
    }
    auto input = ChatInputFromRequest(r);
    if (!input.ok()) return input.status();
    size_t system_bytes = 0;
    auto rendered = chat.Render(*input, &system_bytes);
    if (!rendered.ok()) return rendered.status();
    job.prompt = *std::move(rendered);
    if (system_bytes > 0) job.cache_at_bytes.push_back(system_bytes);
  }
  if (absl::Status s = SamplingFromRequest(r, defaults, engine.max_new_tokens, &job); !s.ok()) return s;
  job.sampling.seed = r.seed();
  job.sampling.presence_penalty = r.presence_penalty();
  job.sampling.frequency_penalty = r.frequency_penalty();
  for (const auto& [token, bias] : r.logit_bias()) job.sampling.logit_bias.push_back({token, bias});
  std::sort(job.sampling.logit_bias.begin(), job.sampling.logit_bias.end());  // a map's order is unspecified
  if (absl::Status s = ValidateSamplingParams(job.sampling); !s.ok()) return s;
  if (r.logit_bias_size() > kMaxLogitBiasEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat("logit_bias: at most ", kMaxLogitBiasEntries, " tokens, got ", r.logit_bias_size()));
  }
  if (r.n() < 0 || r.n() > kMaxChoices) {
    return absl::InvalidArgumentError(absl::StrCat("n: must be in [0, ", kMaxChoices, "] (0: one), got ", r.n()));
  }
  job.n = std::max(1, r.n());
  if (job.n > 1 && !r.session_id().empty()) {
    return absl::InvalidArgumentError(
        "n: more than one choice needs a stateless call (no session_id): a session keeps one continuation");
  }
  job.stop.assign(r.stop().begin(), r.stop().end());
  if (r.messages_size() > 0) job.stop.insert(job.stop.end(), chat.stop().begin(), chat.stop().end());
  if (r.has_expected_position()) job.expected_position = r.expected_position().value();
  job.request_fingerprint = RequestFingerprint(r);
  job.all_or_nothing = r.all_or_nothing();
  if (r.top_logprobs() != 0 && !r.logprobs()) {
    return absl::InvalidArgumentError("top_logprobs: needs logprobs = true");
  }
  if (r.top_logprobs() < 0 || r.top_logprobs() > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs: must be in [0, ", kMaxTopLogprobs, "], got ", r.top_logprobs()));
  }
  if (r.logprobs()) job.top_logprobs = r.top_logprobs();
  if (r.has_speculation()) {
    const std::string& mode = r.speculation().mode();
    if (mode == "off") {
      job.speculative = Speculation::kOff;
    } else if (mode == "ngram") {
      job.speculative = Speculation::kNgram;
    } else if (mode == "draft") {
      job.speculative = Speculation::kDraft;  // the engine refuses it without --draft-model
    } else if (!mode.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("speculation.mode: expected off, ngram or draft, got \"", mode, "\""));
    }
    if (r.speculation().draft_tokens() != 0) job.draft_tokens = r.speculation().draft_tokens();
  }
  return job;
}

absl::Status SetConstraint(const v1::ResponseFormat& format, ConstraintCache& cache, GenerateJob* job) {
  ConstraintSpec spec;
  const std::string& type = format.type();
  if (type.empty() || type == "text") {
    if (!format.json_schema().empty() || !format.grammar().empty()) {
      return absl::InvalidArgumentError("response_format: a json_schema or grammar needs type json_schema or grammar");
    }
    return absl::OkStatus();
  }
  if (type == "json_object") {
    spec.kind = ConstraintSpec::Kind::kJsonObject;
  } else if (type == "json_schema") {
    if (format.json_schema().empty()) return absl::InvalidArgumentError("response_format.json_schema: empty");
    spec.kind = ConstraintSpec::Kind::kJsonSchema;
    spec.text = format.json_schema();
  } else if (type == "grammar") {
    if (format.grammar().empty()) return absl::InvalidArgumentError("response_format.grammar: empty");
    spec.kind = ConstraintSpec::Kind::kGrammar;
    spec.text = format.grammar();
  } else {
    return absl::InvalidArgumentError(absl::StrCat("response_format.type: `", type,
                                                   "` is not one of text, json_object, json_schema, grammar"));
  }
  auto compiled = cache.Get(spec);
  if (!compiled.ok()) return WithContext(compiled.status(), "response_format");
  job->constraint = *std::move(compiled);
  return absl::OkStatus();
}

absl::Status ShuttingDownError() { return absl::UnavailableError("the server is shutting down"); }

void ToProto(const SessionInfo& info, v1::Session* out) {
  out->set_session_id(info.session_id);
  out->set_position(info.position);
  out->set_state_bytes(info.state_bytes);
  out->set_resident(info.resident);
  out->set_busy(info.busy);
  out->set_created_unix_ms(info.created_unix_ms);
  out->set_last_used_unix_ms(info.last_used_unix_ms);
}

namespace {

v1::ModelInfo DescribeModel(const Model& model, const EngineOptions& engine, const ServiceOptions& options) {
  v1::ModelInfo info;
  const ModelConfig& c = model.config();
  info.set_model_name(options.model_name);
  const nlohmann::json layers = model.DescribeAttention();
  for (const nlohmann::json& layer : layers) {
    v1::AttentionLayer* out = info.add_layers();
    out->set_mechanism(layer.value("mechanism", ""));
    nlohmann::json params = layer;
    params.erase("mechanism");
    out->set_params_json(params.dump());
    if (info.mechanism().empty()) info.set_mechanism(out->mechanism());
    if (info.mechanism() != out->mechanism()) info.set_mechanism("mixed");
  }
  info.set_parameters(model.ParameterCount());
  info.set_vocab_size(c.vocab_size);
  info.set_hidden_size(c.hidden_size);
  info.set_num_layers(c.num_layers);
  info.set_num_heads(c.num_heads);
  info.set_num_kv_heads(c.num_kv_heads);
  info.set_head_dim(c.head_dim);
  info.set_state_bytes_per_session(int64_t(model.StateFloats() * sizeof(float)));
  info.set_kv_cache_bytes_per_token(KvCacheFloatsPerToken(c) * int64_t(sizeof(float)));
  v1::Limits* limits = info.mutable_limits();
  limits->set_max_prompt_tokens(engine.max_prompt_tokens);
  limits->set_max_new_tokens(engine.max_new_tokens);
  limits->set_max_sessions(engine.max_sessions);
  limits->set_max_queue(engine.max_queue);
  limits->set_max_batch(engine.max_batch);
  limits->set_state_memory_bytes(engine.state_memory_bytes);
  limits->set_max_stop_strings(options.max_stop_strings);
  limits->set_max_stop_bytes(options.max_stop_bytes);
  limits->set_max_session_id_bytes(kMaxSessionIdBytes);
  limits->set_max_snapshot_bytes(options.max_snapshot_bytes);
  info.set_generation_defaults_json(GenerationDefaultsJson(c.generation));
  return info;
}

}  // namespace

namespace {

ServiceOptions WithChatFormat(ServiceOptions options, const ModelConfig& config) {
  if (!options.chat) options.chat = MakeSmallChatFormat(config.chat_template, "config.json chat_template");
  return options;
}

}  // namespace

InferenceService::InferenceService(Engine& engine, Metrics& metrics, ServiceOptions options)
    : engine_(engine),
      metrics_(metrics),
      options_(WithChatFormat(std::move(options), engine.model().config())),
      model_info_(DescribeModel(engine.model(), engine.options(), options_)),
      id_rng_(std::random_device{}()) {
  const ModelConfig& config = engine.model().config();
  model_info_.set_tool_call_format(ToolCallStyleName(options_.chat->tool_call_style()));
  auto vocab = MakeTokenVocabulary(engine.tokenizer(), engine.model().vocab_size(),
                                   std::vector<int32_t>(config.eos_token_ids.begin(), config.eos_token_ids.end()));
  if (vocab.ok()) {
    constraints_ = std::make_unique<ConstraintCache>(*std::move(vocab));
  } else {
    constraints_error_ = WithContext(vocab.status(), "response_format is unavailable for this model's tokenizer");
  }
}

void InferenceService::BeginDrain() {
  std::unique_lock lock(gate_);
  draining_ = true;
}

void InferenceService::CancelRunning() {
  std::lock_guard lock(mu_);
  for (const auto& cancelled : running_) cancelled->store(true);
}

grpc::ServerUnaryReactor* InferenceService::Finish(grpc::ServerUnaryReactor* reactor, const char* rpc,
                                                   const absl::Status& status) {
  metrics_.CountRequest(rpc, absl::StatusCodeToString(status.code()));
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

std::string InferenceService::SessionIdOrNew(const std::string& id) {
  if (!id.empty()) return id;
  std::lock_guard lock(mu_);
  return absl::StrFormat("s-%016x", id_rng_());
}

absl::StatusOr<std::shared_ptr<const Tenant>> InferenceService::Authorize(grpc::CallbackServerContext* context) {
  if (!options_.auth) return std::shared_ptr<const Tenant>();
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  const std::string_view header = it == metadata.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
  auto tenant = options_.auth->Authenticate(header);
  if (!tenant.ok()) {
    metrics_.CountAuthFailure(header.empty() ? "missing" : "unknown");
    return tenant.status();
  }
  return tenant;
}

std::string InferenceService::Internal(const Tenant* tenant, const std::string& id) {
  return tenant ? TenantPrefix(tenant->name) + id : id;
}

SessionQuota InferenceService::QuotaOf(const Tenant* tenant) {
  if (!tenant) return {};
  return {tenant->name, tenant->quotas.max_sessions, tenant->quotas.max_state_bytes};
}

absl::Status InferenceService::Outward(const Tenant* tenant, const absl::Status& status) {
  if (!tenant || status.ok()) return status;
  const std::string message(status.message());
  if (status.code() == absl::StatusCode::kResourceExhausted && absl::StartsWith(message, "quota ")) {
    const std::string quota = message.substr(6, message.find(' ', 6) - 6);
    metrics_.CountQuotaRefusal(tenant->name, quota);
  }
  absl::Status out(status.code(), absl::StrReplaceAll(message, {{TenantPrefix(tenant->name), ""}}));
  if (std::optional<int64_t> ms = RetryAfterMs(status)) out = WithRetryAfterMs(out, *ms);
  return out;
}

void InferenceService::ToProtoFor(const Tenant* tenant, const SessionInfo& info, v1::Session* out) {
  ToProto(info, out);
  if (tenant && absl::StartsWith(info.session_id, TenantPrefix(tenant->name))) {
    out->set_session_id(info.session_id.substr(TenantPrefix(tenant->name).size()));
  }
}

absl::StatusOr<std::string> InferenceService::CheckSignature(const Tenant* tenant, std::string blob) const {
  const std::string tenant_name = tenant ? tenant->name : "";
  if (IsSignedSnapshot(blob)) {
    if (options_.snapshot_key.empty()) {
      return absl::FailedPreconditionError(
          "snapshot: signed, but this server has no --snapshot-key-file to check the signature with");
    }
    auto inner = VerifySignedSnapshot(options_.snapshot_key, tenant_name, blob);
    if (!inner.ok()) return inner.status();
    return std::string(*inner);
  }
  if (!options_.snapshot_key.empty() && !options_.allow_unsigned_imports) {
    return absl::PermissionDeniedError(
        "snapshot: unsigned; this server imports only snapshots it signed (--allow-unsigned-imports accepts others)");
  }
  return blob;
}

void InferenceService::TrackGenerate(const std::shared_ptr<std::atomic<bool>>& cancelled) {
  std::lock_guard lock(mu_);
  running_.insert(cancelled);
}

void InferenceService::UntrackGenerate(const std::shared_ptr<std::atomic<bool>>& cancelled) {
  std::lock_guard lock(mu_);
  running_.erase(cancelled);
}

grpc::ServerUnaryReactor* InferenceService::GetModelInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetModelInfoRequest*, v1::ModelInfo* response) {
  auto tenant = Authorize(context);
  if (!tenant.ok()) return Finish(context->DefaultReactor(), "GetModelInfo", tenant.status());
  // The model is const: no engine round trip.
  *response = model_info_;
  return Finish(context->DefaultReactor(), "GetModelInfo", absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::CreateSession(grpc::CallbackServerContext* context,
                                                          const v1::CreateSessionRequest* request,
                                                          v1::Session* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  static constexpr char kRpc[] = "CreateSession";
  auto tenant = Authorize(context);
  if (!tenant.ok()) return Finish(reactor, kRpc, tenant.status());
  if (absl::Status s = ValidateSessionId("session_id", request->session_id(), true); !s.ok()) {
    return Finish(reactor, kRpc, s);
  }
  const std::string id = Internal(tenant->get(), SessionIdOrNew(request->session_id()));
  const bool queued = Enqueue([&] {
    engine_.CreateSession(
        id,
        [this, reactor, response, t = *tenant](absl::StatusOr<SessionInfo> info) {
          if (info.ok()) ToProtoFor(t.get(), *info, response);
          Finish(reactor, kRpc, Outward(t.get(), info.status()));
        },
        QuotaOf(tenant->get()));
  });
  return queued ? reactor : Finish(reactor, kRpc, ShuttingDownError());
}

grpc::ServerUnaryReactor* InferenceService::GetSession(grpc::CallbackServerContext* context,
                                                       const v1::GetSessionRequest* request, v1::Session* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  static constexpr char kRpc[] = "GetSession";
  auto tenant = Authorize(context);
  if (!tenant.ok()) return Finish(reactor, kRpc, tenant.status());
  if (absl::Status s = ValidateSessionId("session_id", request->session_id(), false); !s.ok()) {
    return Finish(reactor, kRpc, s);
  }
  const bool queued = Enqueue([&] {
    engine_.GetSession(Internal(tenant->get(), request->session_id()),
                       [this, reactor, response, t = *tenant](absl::StatusOr<SessionInfo> info) {
                         if (info.ok()) ToProtoFor(t.get(), *info, response);
                         Finish(reactor, kRpc, Outward(t.get(), info.status()));
                       });
  });
  return queued ? reactor : Finish(reactor, kRpc, ShuttingDownError());
}

grpc::ServerUnaryReactor* InferenceService::ListSessions(grpc::CallbackServerContext* context,
                                                         const v1::ListSessionsRequest*,
                                                         v1::ListSessionsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  static constexpr char kRpc[] = "ListSessions";
  auto tenant = Authorize(context);
  if (!tenant.ok()) return Finish(reactor, kRpc, tenant.status());
  const bool queued = Enqueue([&] {
    engine_.ListSessions([this, reactor, response, t = *tenant](std::vector<SessionInfo> sessions) {
      std::sort(sessions.begin(), sessions.end(),
                [](const SessionInfo& a, const SessionInfo& b) { return a.session_id < b.session_id; });
      // A tenant sees its own sessions only.
      const std::string prefix = t ? TenantPrefix(t->name) : "";
      for (const SessionInfo& info : sessions) {
        if (absl::StartsWith(info.session_id, prefix)) ToProtoFor(t.get(), info, response->add_sessions());
      }
      Finish(reactor, kRpc, absl::OkStatus());
    });
  });
  return queued ? reactor : Finish(reactor, kRpc, ShuttingDownError());
}

grpc::ServerUnaryReactor* InferenceService::DeleteSession(grpc::CallbackServerContext* context,
                                                          const v1::DeleteSessionRequest* request,
                                                          v1::DeleteSessionResponse*) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  static constexpr char kRpc[] = "DeleteSession";
  auto tenant = Authorize(context);
  if (!tenant.ok()) return Finish(reactor, kRpc, tenant.status());
  if (absl::Status s = ValidateSessionId("session_id", request->session_id(), false); !s.ok()) {
    return Finish(reactor, kRpc, s);
  }
  const bool queued = Enqueue([&] {
    engine_.DeleteSession(Internal(tenant->get(), request->session_id()), [this, reactor, t = *tenant](absl::Status status) {
      Finish(reactor, kRpc, Outward(t.get(), status));
    });
  });
  return queued ? reactor : Finish(reactor, kRpc, ShuttingDownError());
}

grpc::ServerUnaryReactor* InferenceService::ForkSession(grpc::CallbackServerContext* context,
                                                        const v1::ForkSessionRequest* request, v1::Session* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  static constexpr char kRpc[] = "ForkSession";
  auto tenant = Authorize(context);
  if (!tenant.ok()) return Finish(reactor, kRpc, tenant.status());
  for (const absl::Status& s : {ValidateSessionId("session_id", request->session_id(), false),
                                ValidateSessionId("new_session_id", request->new_session_id(), true)}) {
    if (!s.ok()) return Finish(reactor, kRpc, s);
  }
  const Tenant* t = tenant->get();
  const std::string new_id = Internal(t, SessionIdOrNew(request->new_session_id()));
  const bool queued = Enqueue([&] {
    engine_.ForkSession(
        Internal(t, request->session_id()), new_id,
        [this, reactor, response, t = *tenant](absl::StatusOr<SessionInfo> info) {
          if (info.ok()) ToProtoFor(t.get(), *info, response);
          Finish(reactor, kRpc, Outward(t.get(), info.status()));
        },
        QuotaOf(t));
  });
  return queued ? reactor : Finish(reactor, kRpc, ShuttingDownError());
}

}  // namespace steady
