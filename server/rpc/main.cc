// build/bin/steady-server: the gRPC server (proto/steady/v1/inference.proto), health checking,
// reflection and Prometheus metrics. SIGTERM / SIGINT drain gracefully: new connections are refused,
// calls already sent are served, running streams end at the next engine step, the engine persists
// every session to --session-dir.
// With --durability turn (the default with --session-dir) every acknowledged change is already
// there, so a kill -9 loses nothing acknowledged either (docs/durability.md). SIGHUP reloads
// --api-keys (docs/security.md).
#include <pthread.h>
#include <unistd.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "base/status.h"
#include "model/decoder/cpu_weights.h"
#include "model/decoder/model.h"
#include "model/load.h"
#include "model/model_flags.h"
#include "model/text/chat_format.h"
#include "model/text/tokenizer.h"
#include "server/auth/api_keys.h"
#include "server/engine/engine.h"
#include "server/metrics/metrics.h"
#include "server/rpc/listener.h"
#include "server/rpc/service.h"
#include "server/store/directory_store.h"
#include "server/store/redis_store.h"
#include "server/store/snapshot.h"
#include "server/store/snapshot_signing.h"

namespace steady {
namespace {

// How long a drain waits, after it stops listening, for the calls on the connections it took last to
// arrive before gRPC's Shutdown refuses new ones (at most a quarter of --drain-timeout).
constexpr std::chrono::milliseconds kCallsArriveMs(500);

constexpr char kUsage[] = R"(usage: steady-server --model DIR|FILE.gguf [--port N] [--host ADDR] [--state-memory BYTES]
                    [--session-dir DIR | --session-store redis://HOST:PORT [--lease-ms MS]
                    [--replica-name NAME] [--takeover-wait-ms MS]]
                    [--durability turn|shutdown] [--metrics-port N] [--mechanism NAME [--order P] [--scale S]
                    [--param key=value ...]] [--max-queue N] [--max-batch N] [--prefill-budget N]
                    [--max-prompt-tokens N] [--max-new-tokens N] [--max-sessions N]
                    [--speculative off|ngram|draft [--draft-model DIR] [--draft-tokens K] [--ngram-history N]]
                    [--drain-timeout SECONDS] [--device cpu|cuda|auto] [--threads N]
                    [--cpu-weights auto|stored|f32|bf16|q8|q4|q4k] [--cpu-gemm auto|simd|openblas|avx512vnni|avxvnni|avx2|armdot] [--max-context N]
                    [--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]] [--api-keys FILE]
                    [--snapshot-key-file FILE [--allow-unsigned-imports]]

  --port N            gRPC port (default 50051; 0 picks a free one, printed on stderr)
  --host ADDR         listen address (default 127.0.0.1; a name listens on its first address)
  --state-memory B    memory for resident session states: bytes, or with a K/M/G suffix (default 1G)
  --session-dir DIR   where sessions are offloaded and persisted across restarts and crashes
                      (default: none; docs/durability.md)
  --session-store URL redis://HOST:PORT[/DB]: sessions in Redis, shared by every replica pointed at
                      it (docs/deployment.md); instead of --session-dir
  --lease-ms MS       with --session-store: how long a replica's hold on a session outlives the
                      replica (10000); a dead replica's sessions move to another after this
  --replica-name NAME with --session-store: this replica's name in leases and messages
                      (default HOST:PORT/PID)
  --takeover-wait-ms MS  with --session-store: how long a call for a session another replica
                      holds waits for that replica to let it go or for its lease to lapse (a dead
                      replica's does), and a call or a turn's commit waits for the store to answer
                      again, before it fails with UNAVAILABLE (default: 1.5 x --lease-ms)
  --durability D      with a session store: turn (default): every acknowledged change (a finished
                      Generate, Create, Fork, Import, Delete) is on disk, fsynced, before the reply;
                      shutdown: sessions are written on offload and at a clean stop only
  --metrics-port N    serve Prometheus metrics at http://HOST:N/metrics (default: off)
  --device D          where the engine's steps run: cpu, cuda, or auto (default: cuda when this
                      build has the CUDA backend and a GPU is visible and the model's mechanisms
                      have CUDA kernels, else cpu)
  --threads N         CPU backend: threads for the decode GEMMs and prefill (default 0: every core
                      the process may use; docs/cpu.md)
  --cpu-weights W     CPU backend: the projection matrices as the checkpoint stores them (auto,
                      the default: fp32, bf16 or f16, memory-mapped; bf16 and a GGUF file's
                      quantized blocks packed for the dot-product kernels where the CPU has
                      them, activations rounded to bf16 or 8 bits; f16 packed for AVX2's FMAs
                      where bf16 takes them, fp32 activations; stored: every matrix on the
                      widening kernels, fp32 arithmetic on the stored values), or converted at
                      start to f32, bf16, q8 (8-bit blocks of 32 with a scale: about a quarter of
                      fp32's bytes per decode step, at a small quality cost) or q4 (4-bit blocks,
                      about a seventh, a larger cost) or q4k (4-bit super-blocks
                      with 6-bit sub-block scales and minimums, after llama.cpp's Q4_K: 4.625 bits
                      a weight, closer to fp32 than q4) (docs/cpu.md)
  --cpu-gemm G        CPU backend's decode GEMMs: auto (default: bf16 weights on AMX tiles, else
                      VDPBF16PS, else AVX2's FMAs (on Arm BFMMLA/BFDOT), q8, q4, q4k and a GGUF file's quantized
                      blocks on int8 dot products (AMX-INT8 tiles, else AVX512_VNNI, else
                      AVX-VNNI, else AVX2; on Arm SMMLA, else SDOT), where the CPU has them;
                      activations rounded to bf16 / q8; the startup log names each format's
                      path), avx512vnni (as auto, the int8 formats on VPDPBUSD where the
                      CPU has AMX-INT8 too: the same results), avxvnni or avx2 (as auto, the int8 formats on that
                      256-bit path: the same results), armdot (as auto, the int8 formats on SDOT
                      where the CPU has SMMLA too: the same results); these four keep bf16 off
                      AMX tiles (avx512vnni and armdot on the widest other bf16 kernel, avxvnni and
                      avx2 on AVX2's FMAs), simd (the widening kernels), openblas (every
                      fp32 GEMM in OpenBLAS, and as simd for the other formats: a baseline to
                      measure against)
  --max-context N     tokens of KV cache per session on a GPU, preallocated (softmax layers only;
                      default 8192); a request that would pass it is refused
  --mechanism NAME    serve the checkpoint's weights with another attention mechanism (with
                      --order P, --scale S, --param key=value; docs/checkpoint-format.md)
  --prefix-cache-memory B   states kept after prompt prefixes, so a new or stateless request that
                      starts with one prefills only the rest (bytes or K/M/G; default 256M; 0: off)
  --prefix-cache-interval N  the cache keeps a state every N prompt tokens and at each prompt's end (256)
  --speculative M     off (default), ngram or draft: speculative decoding with prompt-lookup drafts
                      or a draft model's, the tokens those of plain decoding (docs/speculative.md);
                      per request: GenerateRequest.speculation. CPU backend only
  --draft-model DIR   the draft model (with --speculative draft): a smaller checkpoint with the
                      same tokenizer (refused otherwise), run on the CPU beside the target
  --draft-tokens K    drafts verified per step, from the rows --max-batch leaves (1..32; 4)
  --ngram-history N   prompt lookup also searches the last N tokens of a session's earlier turns,
                      kept while the session is resident (4096; 0: the turn's own tokens only)
  --max-queue N       Generate calls accepted and not finished; beyond: RESOURCE_EXHAUSTED (1024)
  --max-batch N       decode rows per engine step (64)
  --prefill-budget N  prompt tokens per engine step, in chunks (512)
  --max-prompt-tokens N, --max-new-tokens N   per request (1048576, 65536)
  --max-sessions N    resident and offloaded sessions together (1048576)
  --drain-timeout S   on SIGTERM/SIGINT, seconds running calls get to finish (10); Generates still
                      running in its last second end with finish_reason "cancelled"

Security (docs/security.md):
  --tls-cert PEM, --tls-key PEM   serve gRPC over TLS with this certificate chain and key
  --tls-client-ca PEM mutual TLS: require a client certificate signed by this CA
  --api-keys FILE     tenants, the SHA-256 of their keys and their quotas (JSON); every call then
                      needs "authorization: Bearer KEY" and sees its tenant's sessions only.
                      SIGHUP reloads the file (a removed key stops working at once)
  --snapshot-key-file FILE   sign exported snapshots (HMAC-SHA-256 over the snapshot and the
                      tenant, key: the file's bytes, at least 32) and import only signed ones
  --allow-unsigned-imports   with --snapshot-key-file: import unsigned snapshots too
  A non-loopback --host without TLS or without --api-keys logs a warning.

Chat (docs/api.md, "Chat"): GenerateRequest.messages are rendered with DIR's Jinja chat template
(chat_template.jinja, or tokenizer_config.json's "chat_template"), else config.json's small
"chat_template" or the default; the log names which.
)";

absl::StatusOr<EngineOptions> EngineOptionsFromFlags(const Flags& flags) {
  EngineOptions o;
  auto memory = flags.GetBytes("state-memory", "1G");
  if (!memory.ok()) return memory.status();
  o.state_memory_bytes = *memory;
  const std::string durability = flags.Get("durability", "turn");
  if (durability != "turn" && durability != "shutdown") {
    return absl::InvalidArgumentError(absl::StrCat("--durability: expected turn or shutdown, got \"", durability, "\""));
  }
  if (flags.Has("session-dir") && flags.Has("session-store")) {
    return absl::InvalidArgumentError("--session-dir and --session-store both name a session store; give one");
  }
  const bool store = flags.Has("session-dir") || flags.Has("session-store");
  for (const char* f : {"durability", "lease-ms", "replica-name", "takeover-wait-ms"}) {
    if (flags.Has(f) && !store) return absl::InvalidArgumentError(absl::StrCat("--", f, " needs --session-dir or --session-store"));
  }
  if (flags.Has("session-store")) {
    // Replicas: the way back home after a failover (idle sessions let go after half a lease), and the
    // waits for a peer's lease or for the store (docs/deployment.md).
    auto lease = flags.GetInt("lease-ms", RedisStoreOptions().lease_ms, 100, int64_t(1) << 31);
    if (!lease.ok()) return lease.status();
    auto wait = flags.GetInt("takeover-wait-ms", *lease * 3 / 2, 0, int64_t(1) << 31);
    if (!wait.ok()) return wait.status();
    o.release_idle_ms = *lease / 2;
    o.store_wait_ms = *wait;
    o.store_poll_ms = std::clamp<int64_t>(*lease / 10, 20, 1000);
  }
  o.durability = durability == "turn" ? Durability::kTurn : Durability::kShutdown;
  o.device = flags.Get("device", "auto");
  BackendOptions cpu;
  if (absl::Status s = CpuOptionsFromFlags(flags, &cpu); !s.ok()) return s;
  o.cpu_threads = cpu.cpu_threads;
  o.cpu_weights = cpu.cpu_weights;
  o.cpu_gemm = cpu.cpu_gemm;
  auto max_context = flags.GetInt("max-context", o.max_context, 1, int64_t(1) << 30);
  if (!max_context.ok()) return max_context.status();
  o.max_context = *max_context;
  int64_t max_queue = o.max_queue, max_batch = o.max_batch, prefill = o.prefill_budget;
  const std::pair<const char*, int64_t*> ints[] = {
      {"max-queue", &max_queue},           {"max-batch", &max_batch},
      {"prefill-budget", &prefill},        {"max-prompt-tokens", &o.max_prompt_tokens},
      {"max-new-tokens", &o.max_new_tokens}, {"max-sessions", &o.max_sessions}};
  for (const auto& [name, out] : ints) {
    auto v = flags.GetInt(name, *out, 1, int64_t(1) << 30);
    if (!v.ok()) return v.status();
    *out = *v;
  }
  auto prefix_cache = flags.GetBytes("prefix-cache-memory", "256M");
  if (!prefix_cache.ok() && flags.Get("prefix-cache-memory") != "0") return prefix_cache.status();
  o.prefix_cache_bytes = prefix_cache.ok() ? *prefix_cache : 0;
  auto interval = flags.GetInt("prefix-cache-interval", o.prefix_cache_interval, 1, 1 << 20);
  if (!interval.ok()) return interval.status();
  o.prefix_cache_interval = int(*interval);
  if (absl::Status st = SpeculationFromFlags(flags, &o.speculative, &o.draft_tokens); !st.ok()) return st;
  auto history = flags.GetInt("ngram-history", o.ngram_history, 0, int64_t(1) << 24);
  if (!history.ok()) return history.status();
  o.ngram_history = *history;
  o.max_queue = int(max_queue);
  o.max_batch = int(max_batch);
  o.prefill_budget = int(prefill);
  return o;
}

// The session store --session-dir or --session-store names (null: none). Sessions in a Redis store
// are keyed by the model's fingerprint, so replicas serving other weights never see them.
absl::StatusOr<std::shared_ptr<SessionStore>> StoreFromFlags(const Flags& flags, const Model& model, int64_t port) {
  if (flags.Has("session-dir")) return DirectoryStore::Open(flags.Get("session-dir"));
  if (!flags.Has("session-store")) return std::shared_ptr<SessionStore>();
  RedisStoreOptions o;
  o.url = flags.Get("session-store");
  auto lease = flags.GetInt("lease-ms", o.lease_ms, 100, int64_t(1) << 31);
  if (!lease.ok()) return lease.status();
  o.lease_ms = *lease;
  o.key_prefix = absl::StrCat("steady:", absl::Hex(ModelFingerprint(model), absl::kZeroPad16), ":");
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  o.owner = flags.Get("replica-name", absl::StrCat(host, ":", port, "/", ::getpid()));
  if (o.owner.empty() || o.owner.find(' ') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--replica-name: expected a name without spaces, got \"", o.owner, "\""));
  }
  return RedisStore::Open(o);
}

std::string ReadPem(const std::string& path, absl::Status* error) {
  auto text = ReadWholeFile(path);
  if (!text.ok() && error->ok()) *error = text.status();
  return text.ok() ? *text : "";
}

// Plaintext without --tls-cert; TLS with it; mutual TLS with --tls-client-ca too.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> CredentialsFromFlags(const Flags& flags) {
  if (!flags.Has("tls-cert") && !flags.Has("tls-key")) {
    if (flags.Has("tls-client-ca")) return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
    return grpc::InsecureServerCredentials();
  }
  if (!flags.Has("tls-cert") || !flags.Has("tls-key")) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both");
  }
  absl::Status error;
  grpc::SslServerCredentialsOptions tls(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  tls.pem_key_cert_pairs.push_back({ReadPem(flags.Get("tls-key"), &error), ReadPem(flags.Get("tls-cert"), &error)});
  if (flags.Has("tls-client-ca")) {
    tls.pem_root_certs = ReadPem(flags.Get("tls-client-ca"), &error);
    tls.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  if (!error.ok()) return error;
  return grpc::SslServerCredentials(tls);
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

// The directory's own name ("models/tiny-softmax/" -> "tiny-softmax").
std::string ModelName(const std::string& dir) {
  std::filesystem::path p(dir);
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

absl::Status Run(int argc, char** argv) {
  std::set<std::string> known = {"model",         "port",          "host",          "state-memory",
                                 "session-dir",   "metrics-port",  "max-queue",     "max-batch",
                                 "prefill-budget", "max-prompt-tokens", "max-new-tokens", "max-sessions",
                                 "drain-timeout", "device",       "max-context", "durability", "threads", "cpu-weights", "cpu-gemm",
                                 "session-store", "lease-ms",      "replica-name", "takeover-wait-ms", "prefix-cache-memory",
                                 "prefix-cache-interval", "tls-cert",     "tls-key",       "tls-client-ca",
                                 "api-keys",      "snapshot-key-file", "ngram-history"};
  known.insert(kMechanismFlags.begin(), kMechanismFlags.end());
  known.insert(kSpeculationFlags.begin(), kSpeculationFlags.end());
  auto flags = Flags::Parse(argc, argv, {.with_value = known, .switches = {"allow-unsigned-imports"}});
  if (!flags.ok()) return flags.status();
  if (flags->help()) {
    std::fputs(kUsage, stdout);
    return absl::OkStatus();
  }
  auto dir = flags->Require("model");
  auto port = flags->GetInt("port", 50051, 0, 65535);
  auto metrics_port = flags->GetInt("metrics-port", -1, 0, 65535);
  auto drain_timeout = flags->GetDouble("drain-timeout", 10);
  auto override = MechanismOverrideFromFlags(*flags);
  auto engine_options = EngineOptionsFromFlags(*flags);
  if (absl::Status s = FirstError({dir.status(), port.status(), metrics_port.status(), drain_timeout.status(),
                                   override.status(), engine_options.status()});
      !s.ok()) {
    return s;
  }
  const std::string host = flags->Get("host", "127.0.0.1");
  auto credentials = CredentialsFromFlags(*flags);
  if (!credentials.ok()) return credentials.status();
  ServiceOptions service_options;
  service_options.model_name = ModelName(*dir);
  if (flags->Has("api-keys")) {
    auto auth = Authenticator::Load(flags->Get("api-keys"));
    if (!auth.ok()) return WithContext(auth.status(), "--api-keys");
    service_options.auth = *std::move(auth);
  }
  if (flags->Has("snapshot-key-file")) {
    auto key = LoadSnapshotKey(flags->Get("snapshot-key-file"));
    if (!key.ok()) return WithContext(key.status(), "--snapshot-key-file");
    service_options.snapshot_key = *std::move(key);
  } else if (flags->Has("allow-unsigned-imports")) {
    return absl::InvalidArgumentError("--allow-unsigned-imports needs --snapshot-key-file");
  }
  service_options.allow_unsigned_imports = flags->Has("allow-unsigned-imports");
  if (!IsLoopback(host) && (!flags->Has("tls-cert") || !service_options.auth)) {
    std::fprintf(stderr, "steady-server: WARNING: listening on %s %s: anyone who can reach the port can %s "
                 "(docs/security.md)\n", host.c_str(),
                 !flags->Has("tls-cert") ? "without TLS" : "without --api-keys",
                 !flags->Has("tls-cert") ? "read the traffic" : "use every session");
  }
  if (service_options.auth && service_options.snapshot_key.empty()) {
    std::fprintf(stderr, "steady-server: note: --api-keys without --snapshot-key-file: exported snapshots are "
                 "unsigned and any well-formed snapshot imports (docs/security.md)\n");
  }

  const auto load_start = std::chrono::steady_clock::now();
  auto model = LoadModel(*dir, *override);
  if (!model.ok()) return model.status();
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  auto tokenizer = LoadTokenizer(*dir);
  if (!tokenizer.ok()) return tokenizer.status();
  auto chat = LoadChatFormatFor(*dir, &model->config().chat_template);
  if (!chat.ok()) return chat.status();
  std::fprintf(stderr, "steady-server: chat messages rendered with %s\n", (*chat)->source().c_str());
  service_options.chat = *std::move(chat);
  auto draft_model = LoadDraftModelFromFlags(*flags, **tokenizer);
  if (!draft_model.ok()) return draft_model.status();
  engine_options->draft_model = draft_model->get();  // outlives the engine (declared before it)
  auto store = StoreFromFlags(*flags, *model, *port);
  if (!store.ok()) return store.status();
  engine_options->store = *std::move(store);
  auto engine = Engine::Start(*model, **tokenizer, *engine_options);
  if (!engine.ok()) return engine.status();
  std::fprintf(stderr, "steady-server: loaded %s in %.2f s (%lld parameters, %.1f MB of %s weights), engine ready in %.2f s\n",
               dir->c_str(), load_seconds, static_cast<long long>(model->ParameterCount()), model->WeightBytes() / 1e6,
               CpuMatrices::From(*model, CpuWeights::kAuto).TypeNames().c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count() - load_seconds);

  Metrics metrics;
  std::unique_ptr<MetricsHttpServer> metrics_server;
  if (*metrics_port >= 0) {
    Engine* e = engine->get();
    auto started = MetricsHttpServer::Start(host, int(*metrics_port),
                                            [&metrics, e] { return metrics.Render(e->stats(), e->options().store.get()); });
    if (!started.ok()) return started.status();
    metrics_server = *std::move(started);
    std::fprintf(stderr, "steady-server: metrics on http://%s:%d/metrics\n", host.c_str(), metrics_server->port());
  }

  InferenceService service(**engine, metrics, service_options);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // The port is listened on by ConnectionListener (server/rpc/listener.h), which hands gRPC each
  // connection, so that a drain stops taking connections before gRPC's Shutdown (below).
  auto listener = ConnectionListener::Open(host, int(*port));
  if (!listener.ok()) return listener.status();
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor =
      builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, *credentials);
  // One deliberate message limit instead of gRPC's default 4 MiB (docs/api.md, "Limits"): room for
  // the gateway's 16 MiB bodies; a longer input goes to a session in parts.
  constexpr int kMaxMessageBytes = 32 << 20;  // as clients/common/channel.h's, and the gateway's
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return absl::UnavailableError("cannot start the gRPC server");
  (*listener)->Start(acceptor.get());
  const int bound_port = (*listener)->port();
  // Which instruction path each weight format takes on this CPU (docs/cpu.md), before the line a
  // supervisor waits for.
  if (absl::StartsWith((*engine)->device(), "cpu")) {
    std::fprintf(stderr, "steady-server: cpu kernels: %s\n",
                 CpuKernelsSummary(engine_options->cpu_gemm, engine_options->cpu_weights).c_str());
  }
  std::fprintf(stderr, "steady-server: model %s (%s) on %s, listening on %s:%d%s\n", service_options.model_name.c_str(),
               model->DescribeAttention()[0].value("mechanism", "").c_str(), (*engine)->device().c_str(), host.c_str(),
               bound_port, flags->Has("tls-cert") ? " (TLS)" : "");

  // Signals are blocked in every thread (see main), so this is the only place they arrive.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  int signal_number = 0;
  for (;;) {
    sigwait(&signals, &signal_number);
    if (signal_number != SIGHUP) break;
    // Streams keep running; every call from now on is checked against the file as it is now.
    if (!service_options.auth) {
      std::fprintf(stderr, "steady-server: SIGHUP: no --api-keys to reload\n");
    } else if (absl::Status s = service_options.auth->Reload(); s.ok()) {
      std::fprintf(stderr, "steady-server: SIGHUP: reloaded %s (%zu tenants)\n", service_options.auth->path().c_str(),
                   service_options.auth->TenantNames().size());
    } else {
      std::fprintf(stderr, "steady-server: SIGHUP: %s; the previous keys stay in force\n", std::string(s.message()).c_str());
    }
  }
  std::fprintf(stderr, "steady-server: %s, draining\n", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");

  server->GetHealthCheckService()->SetServingStatus(false);
  // Sessions are let go as soon as they are idle, so replicas that take over their next calls need
  // not wait for the leases to lapse.
  (*engine)->Drain();
  // Stop listening at once (a balancer's next connection is refused, so it sends the call to another
  // replica), taking every connection the kernel had already accepted. Their calls are on their way:
  // they get a moment to arrive before Shutdown sends GOAWAY, which would refuse a call the client
  // has sent (a balancer cannot send it on: the client would see the error). Shutdown then waits for
  // running calls: a Generate stream runs to its end, so a rolling restart cuts no turn short. In
  // the drain's last second (or half, if shorter) the rest are asked to stop and end at the next
  // step boundary with finish_reason "cancelled". After the deadline gRPC cancels what is left; a
  // call still waiting on the engine then ends when the engine is destroyed (queued jobs fail with
  // UNAVAILABLE).
  const auto drain = std::chrono::milliseconds(int64_t(*drain_timeout * 1000));
  const auto deadline = std::chrono::system_clock::now() + drain;
  (*listener)->Close();
  std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(kCallsArriveMs, drain / 4));
  std::future<void> shut = std::async(std::launch::async, [&] { server->Shutdown(deadline); });
  if (shut.wait_until(deadline - std::min<std::chrono::milliseconds>(std::chrono::seconds(1), drain / 2)) !=
      std::future_status::ready) {
    service.CancelRunning();
  }
  if (shut.wait_until(deadline + std::chrono::seconds(2)) != std::future_status::ready) {
    std::fprintf(stderr, "steady-server: calls still running after the drain timeout, stopping the engine\n");
  }
  service.BeginDrain();     // from here no handler reaches the engine
  metrics_server.reset();  // it reads the engine's stats
  engine->reset();         // persists sessions to --session-dir
  shut.wait();
  server.reset();
  acceptor.reset();
  std::fprintf(stderr, "steady-server: stopped\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace steady

int main(int argc, char** argv) {
  if (argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "help")) {
    std::fputs(steady::kUsage, stdout);
    return 0;
  }
  // Block the shutdown signals before any thread starts, so every thread inherits the mask and
  // Run's sigwait receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const absl::Status status = steady::Run(argc - 1, argv + 1);
  if (!status.ok()) {
    std::fprintf(stderr, "steady-server: %s\n", std::string(status.message()).c_str());
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
