// build/bin/steady-cli: a command-line client for every RPC of steady.v1.Inference (docs/api.md).
// It speaks the API only (the generated proto code), never model/ or kernels/.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "base/status.h"
#include "clients/common/channel.h"
#include "steady/v1/inference.grpc.pb.h"

namespace steady::cli {
namespace {

constexpr char kGlobalUsage[] = R"(usage: steady-cli [--addr HOST:PORT] [--timeout SECONDS] [--api-key KEY] [--tls-ca PEM ...] COMMAND ...

  --addr HOST:PORT   the server (default $STEADY_ADDR, else 127.0.0.1:50051)
  --timeout SECONDS  deadline of each call (default: none)
)";
constexpr char kErrorsUsage[] = R"(
Errors go to stderr as "steady-cli: CODE: message"; the exit status is 2 for usage errors, 1 otherwise.
steady-cli COMMAND --help shows one command.
)";

// Server errors keep their canonical code name so scripts can match them.
absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

std::string ToJson(const google::protobuf::Message& m, bool pretty = true) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  if (!pretty) return out;
  return out.empty() || out.back() != '\n' ? out + "\n" : out;
}

struct Client {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Inference::Stub> stub;
  double timeout_seconds = 0;  // 0: none

  // The deadline, and the session as metadata `x-steady-session`, which a balancer in front of
  // replicas routes on (docs/deployment.md).
  void Prepare(grpc::ClientContext* context, const std::string& session = "") const {
    if (!session.empty()) context->AddMetadata("x-steady-session", session);
    if (timeout_seconds > 0) {
      context->set_deadline(std::chrono::system_clock::now() +
                            std::chrono::microseconds(int64_t(timeout_seconds * 1e6)));
    }
  }
};

// One command: name (with "sessions " for the session commands), usage, flags, positional words, body.
struct Command {
  const char* name;
  const char* usage;  // the arguments after the name, then what it does
  std::set<std::string> flags;
  std::set<std::string> switches;
  std::vector<std::string> positional;
  absl::Status (*run)(const Client&, const Flags&);
};

absl::Status Info(const Client& c, const Flags&) {
  grpc::ClientContext context;
  c.Prepare(&context);
  v1::ModelInfo info;
  if (auto s = FromGrpc(c.stub->GetModelInfo(&context, {}, &info)); !s.ok()) return s;
  std::fputs(ToJson(info).c_str(), stdout);
  return absl::OkStatus();
}

// grpc.health.v1.Health/Check with the overall service name "", through a generic stub: the request
// is the empty message, the response is field 1 (varint ServingStatus), so no health.proto is needed.
absl::Status Health(const Client& c, const Flags&) {
  grpc::GenericStub stub(c.channel);
  grpc::ClientContext context;
  c.Prepare(&context);
  grpc::ByteBuffer request, response;
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  if (auto s = FromGrpc(done.get_future().get()); !s.ok()) return s;
  std::vector<grpc::Slice> slices;
  (void)response.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  const int status = bytes.size() >= 2 && bytes[0] == 0x08 ? bytes[1] : 0;  // 1: SERVING, 2: NOT_SERVING
  std::printf("%s\n", status == 1 ? "SERVING" : status == 2 ? "NOT_SERVING" : "UNKNOWN");
  return status == 1 ? absl::OkStatus() : absl::UnavailableError("not serving");
}

absl::StatusOr<v1::GenerateRequest> GenerateRequestFromArgs(const Flags& a) {
  v1::GenerateRequest r;
  auto max_tokens = a.GetInt("max-tokens", 64, INT64_MIN, INT64_MAX);
  auto temperature = a.GetDouble("temperature", 0, /*allow_nonfinite=*/true);
  auto top_k = a.GetInt("top-k", 0, INT32_MIN, INT32_MAX);
  auto top_p = a.GetDouble("top-p", 0, /*allow_nonfinite=*/true);
  auto penalty = a.GetDouble("repetition-penalty", 0, /*allow_nonfinite=*/true);
  auto seed = a.GetUint("seed", 0);
  // NaN and infinities go to the server, which names the field it refuses.
  if (absl::Status s = FirstError({max_tokens.status(), temperature.status(), top_k.status(), top_p.status(),
                                   penalty.status(), seed.status()});
      !s.ok()) {
    return s;
  }
  std::string prompt = a.Get("prompt");
  if (prompt == "-") prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  r.set_session_id(a.Get("session"));
  r.set_prompt(prompt);
  r.set_max_tokens(*max_tokens);
  // Sampling flags left out are left out of the request: the server applies the checkpoint's
  // generation_config.json defaults (docs/api.md, "Sampling").
  if (a.Has("temperature")) r.set_temperature(float(*temperature));
  if (a.Has("top-k")) r.set_top_k(int32_t(*top_k));
  if (a.Has("top-p")) r.set_top_p(float(*top_p));
  if (a.Has("repetition-penalty")) r.set_repetition_penalty(float(*penalty));
  r.set_seed(*seed);
  for (const std::string& stop : a.GetAll("stop")) r.add_stop(stop);
  return r;
}

absl::Status Generate(const Client& c, const Flags& a) {
  auto request = GenerateRequestFromArgs(a);
  if (!request.ok()) return request.status();
  const bool json = a.Has("json");
  grpc::ClientContext context;
  c.Prepare(&context, request->session_id());
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = c.stub->Generate(&context, *request);
  v1::GenerateResponse message, last;
  while (reader->Read(&message)) {
    if (json) {
      std::printf("%s\n", ToJson(message, /*pretty=*/false).c_str());
    } else {
      std::fwrite(message.text().data(), 1, message.text().size(), stdout);
    }
    std::fflush(stdout);
    if (!message.finish_reason().empty()) last = message;
  }
  if (auto s = FromGrpc(reader->Finish()); !s.ok()) {
    if (!json) std::printf("\n");
    return s;
  }
  if (!json) {
    std::printf("\n");
    std::fprintf(stderr, "[finish: %s, %lld prompt tokens, %lld generated, session position %lld]\n",
                 last.finish_reason().c_str(), (long long)last.usage().prompt_tokens(),
                 (long long)last.usage().completion_tokens(), (long long)last.usage().session_position());
  }
  return absl::OkStatus();
}

absl::Status SessionsCreate(const Client& c, const Flags& a) {
  grpc::ClientContext context;
  c.Prepare(&context, a.Get("id"));
  v1::CreateSessionRequest request;
  request.set_session_id(a.Get("id"));
  v1::Session session;
  if (auto s = FromGrpc(c.stub->CreateSession(&context, request, &session)); !s.ok()) return s;
  std::fputs(ToJson(session).c_str(), stdout);
  return absl::OkStatus();
}

absl::Status SessionsList(const Client& c, const Flags&) {
  grpc::ClientContext context;
  c.Prepare(&context);
  v1::ListSessionsResponse response;
  if (auto s = FromGrpc(c.stub->ListSessions(&context, {}, &response)); !s.ok()) return s;
  std::fputs(ToJson(response).c_str(), stdout);
  return absl::OkStatus();
}

absl::Status SessionsGet(const Client& c, const Flags& a) {
  grpc::ClientContext context;
  c.Prepare(&context, a.positional()[0]);
  v1::GetSessionRequest request;
  request.set_session_id(a.positional()[0]);
  v1::Session session;
  if (auto s = FromGrpc(c.stub->GetSession(&context, request, &session)); !s.ok()) return s;
  std::fputs(ToJson(session).c_str(), stdout);
  return absl::OkStatus();
}

absl::Status SessionsDelete(const Client& c, const Flags& a) {
  grpc::ClientContext context;
  c.Prepare(&context, a.positional()[0]);
  v1::DeleteSessionRequest request;
  request.set_session_id(a.positional()[0]);
  v1::DeleteSessionResponse response;
  return FromGrpc(c.stub->DeleteSession(&context, request, &response));
}

absl::Status SessionsFork(const Client& c, const Flags& a) {
  grpc::ClientContext context;
  c.Prepare(&context, a.positional()[0]);
  v1::ForkSessionRequest request;
  request.set_session_id(a.positional()[0]);
  request.set_new_session_id(a.Get("new-id"));
  v1::Session session;
  if (auto s = FromGrpc(c.stub->ForkSession(&context, request, &session)); !s.ok()) return s;
  std::fputs(ToJson(session).c_str(), stdout);
  return absl::OkStatus();
}

absl::Status SessionsExport(const Client& c, const Flags& a) {
  const std::string& path = a.positional()[1];
  grpc::ClientContext context;
  c.Prepare(&context, a.positional()[0]);
  v1::ExportSessionRequest request;
  request.set_session_id(a.positional()[0]);
  std::unique_ptr<grpc::ClientReader<v1::SessionChunk>> reader = c.stub->ExportSession(&context, request);
  std::string blob;
  v1::SessionChunk chunk;
  while (reader->Read(&chunk)) blob += chunk.data();
  if (auto s = FromGrpc(reader->Finish()); !s.ok()) return s;
  // Written beside the target and renamed, so an interrupted export never leaves a partial file.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(blob.data(), std::streamsize(blob.size()));
    out.close();
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  std::fprintf(stderr, "[exported %zu bytes to %s]\n", blob.size(), path.c_str());
  return absl::OkStatus();
}

absl::Status SessionsImport(const Client& c, const Flags& a) {
  const std::string& path = a.positional()[0];
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  const std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  grpc::ClientContext context;
  c.Prepare(&context, a.Get("id"));
  v1::Session session;
  std::unique_ptr<grpc::ClientWriter<v1::ImportSessionRequest>> writer = c.stub->ImportSession(&context, &session);
  constexpr size_t kChunk = size_t(1) << 20;  // well under gRPC's default 4 MiB message limit
  size_t offset = 0;
  do {
    v1::ImportSessionRequest request;
    if (offset == 0) request.set_session_id(a.Get("id"));
    request.set_data(blob.substr(offset, kChunk));
    offset += kChunk;
    if (!writer->Write(request)) break;  // the server ended the call; Finish says why
  } while (offset < blob.size());
  writer->WritesDone();
  if (auto s = FromGrpc(writer->Finish()); !s.ok()) return s;
  std::fputs(ToJson(session).c_str(), stdout);
  return absl::OkStatus();
}

const std::set<std::string> kGlobalFlags = [] {
  std::set<std::string> flags = {"addr", "timeout"};
  flags.insert(kChannelFlags.begin(), kChannelFlags.end());
  return flags;
}();

const Command kCommands[] = {
    {"info", "\n    the model: mechanism, shape, state bytes per session, limits (JSON)", {}, {}, {}, Info},
    {"health", "\n    prints SERVING or NOT_SERVING (grpc.health.v1); exit 1 unless serving", {}, {}, {}, Health},
    {"generate",
     " [--session ID] [--prompt TEXT | --prompt -] [--max-tokens N] [--temperature T] [--top-k K]\n"
     "         [--top-p P] [--repetition-penalty R] [--seed S] [--stop STR ...] [--json]\n"
     "    streams the text to stdout as it arrives, usage to stderr; --json prints every streamed\n"
     "    message as a JSON line instead. Without --session the call is stateless. Sampling flags\n"
     "    left out take the model's generation_config.json defaults (--max-tokens: 64).",
     {"session", "prompt", "max-tokens", "temperature", "top-k", "top-p", "repetition-penalty", "seed", "stop"},
     {"json"},
     {},
     Generate},
    {"sessions create", " [--id ID]\n    a new empty session (JSON)", {"id"}, {}, {}, SessionsCreate},
    {"sessions list", "\n    every session: id, position, state bytes, resident, busy (JSON)", {}, {}, {}, SessionsList},
    {"sessions get", " ID\n    one session (JSON)", {}, {}, {"ID"}, SessionsGet},
    {"sessions delete", " ID\n    deletes the session and its state", {}, {}, {"ID"}, SessionsDelete},
    {"sessions fork", " ID [--new-id ID]\n    a new session with a copy of ID's state", {"new-id"}, {}, {"ID"},
     SessionsFork},
    {"sessions export", " ID FILE\n    writes the session's snapshot to FILE", {}, {}, {"ID", "FILE"}, SessionsExport},
    {"sessions import", " FILE [--id ID]\n    a new session from a snapshot file", {"id"}, {}, {"FILE"},
     SessionsImport},
};

std::string Usage(const Command* only) {
  std::string out = std::string(kGlobalUsage) + kChannelUsage;
  out += only ? "\n" : "\ncommands:\n";
  for (const Command& c : kCommands) {
    if (only == nullptr || only == &c) out += std::string("  ") + c.name + c.usage + "\n";
  }
  return out + kErrorsUsage;
}

absl::Status Run(const std::vector<std::string>& argv) {
  // The command's words are the first positional arguments; flags may come before or after them.
  std::set<std::string> all_flags = kGlobalFlags, all_switches;
  for (const Command& c : kCommands) {
    all_flags.insert(c.flags.begin(), c.flags.end());
    all_switches.insert(c.switches.begin(), c.switches.end());
  }
  auto scan = Flags::Parse(argv, {.with_value = all_flags, .switches = all_switches, .positional = true});
  if (!scan.ok()) return scan.status();
  const std::vector<std::string>& words = scan->positional();
  const Command* command = nullptr;
  size_t used = 0;
  for (const Command& c : kCommands) {
    const std::string name = c.name;
    const size_t space = name.find(' ');
    if (space == std::string::npos ? (!words.empty() && words[0] == name)
                                   : (words.size() >= 2 && words[0] == name.substr(0, space) &&
                                      words[1] == name.substr(space + 1))) {
      command = &c;
      used = space == std::string::npos ? 1 : 2;
    }
  }
  if (scan->help()) {
    std::fputs(Usage(command).c_str(), stdout);
    return absl::OkStatus();
  }
  if (command == nullptr) {
    const std::string what = words.empty() ? "no command" : absl::StrCat("unknown command \"", words[0],
                                                                         words.size() > 1 ? " " + words[1] : "", "\"");
    return absl::InvalidArgumentError(what);
  }
  // Parse again with only this command's flags, and drop its words.
  std::set<std::string> flags = kGlobalFlags;
  flags.insert(command->flags.begin(), command->flags.end());
  auto args = Flags::Parse(argv, {.with_value = flags, .switches = command->switches, .positional = true});
  if (!args.ok()) return absl::InvalidArgumentError(absl::StrCat(command->name, ": ", args.status().message()));
  args->DropPositional(used);
  if (auto s = args->ExpectPositional(command->positional); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(command->name, ": ", s.message()));
  }
  auto timeout = args->GetDouble("timeout", 0);
  if (!timeout.ok()) return timeout.status();
  const char* env_addr = std::getenv("STEADY_ADDR");
  Client client;
  auto channel_options = ChannelOptionsFromFlags(*args, args->Get("addr", env_addr ? env_addr : "127.0.0.1:50051"));
  if (!channel_options.ok()) return channel_options.status();
  auto channel = OpenChannel(*channel_options);
  if (!channel.ok()) return channel.status();
  client.channel = *std::move(channel);
  client.stub = v1::Inference::NewStub(client.channel);
  client.timeout_seconds = *timeout;
  return command->run(client, *args);
}

// A usage error is one the CLI found itself, before calling the server: the server names proto
// fields (top_p), the CLI names flags (--top-p) or the command.
bool IsUsageError(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kInvalidArgument) return false;
  const std::string m(s.message());
  if (m.rfind("--", 0) == 0 || m.rfind("unknown flag", 0) == 0 || m.rfind("unknown command", 0) == 0 ||
      m.rfind("no command", 0) == 0) {
    return true;
  }
  for (const Command& c : kCommands) {
    if (m.rfind(std::string(c.name) + ": ", 0) == 0) return true;
  }
  return false;
}

}  // namespace
}  // namespace steady::cli

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "help") {
    std::fputs(steady::cli::Usage(nullptr).c_str(), stdout);
    return 0;
  }
  const absl::Status s = steady::cli::Run(std::vector<std::string>(argv + 1, argv + argc));
  if (s.ok()) return 0;
  std::fprintf(stderr, "steady-cli: %s: %s\n", absl::StatusCodeToString(s.code()).c_str(),
               std::string(s.message()).c_str());
  if (steady::cli::IsUsageError(s)) {
    std::fprintf(stderr, "(steady-cli --help lists the commands)\n");
    return 2;
  }
  return 1;
}
