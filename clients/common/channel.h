// The channel steady-cli and steady-loadtest open to steady-server: plaintext or TLS (optionally
// with a client certificate), and an API key sent as `authorization: Bearer KEY` on every call
// (docs/security.md). The flags are the same in both programs.
#ifndef STEADY_CLIENTS_COMMON_CHANNEL_H_
#define STEADY_CLIENTS_COMMON_CHANNEL_H_

#include <memory>
#include <set>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "base/flags.h"

namespace steady {

struct ChannelOptions {
  std::string addr;
  std::string api_key;          // --api-key, else $STEADY_API_KEY; empty: none sent
  std::string tls_ca;           // --tls-ca PEM: TLS, the server verified against this CA
  std::string tls_cert;         // --tls-cert PEM, --tls-key PEM: a client certificate (mutual TLS)
  std::string tls_key;
  std::string tls_server_name;  // --tls-server-name: the name the certificate must carry
                                // (default: the host of addr)
};

// The largest gRPC message steady-server and its clients (steady-cli, steady-loadtest; the gateway's
// maxMessageBytes) send or take, instead of gRPC's default 4 MiB: room for a 16 MiB prompt, the
// gateway's largest body, twice over. steady-server sets the same (server/rpc/main.cc). A message
// over it is RESOURCE_EXHAUSTED from gRPC itself, which the gateway answers with 413, never 429
// (docs/api.md, "Limits"); longer inputs go to a session in parts.
inline constexpr int kMaxMessageBytes = 32 << 20;

// The flags ChannelOptionsFromFlags reads, for a program's FlagSpec, and their usage lines.
inline const std::set<std::string> kChannelFlags = {"api-key", "tls-ca", "tls-cert", "tls-key", "tls-server-name"};
inline constexpr char kChannelUsage[] =
    R"(  --api-key KEY      sent as "authorization: Bearer KEY" (default $STEADY_API_KEY)
  --tls-ca PEM       connect over TLS, verifying the server against this CA
  --tls-cert PEM, --tls-key PEM   a client certificate for mutual TLS (with --tls-ca)
  --tls-server-name NAME          the name the server's certificate must carry (default: the host)
)";

// INVALID_ARGUMENT naming the flag for a half-given pair or a TLS flag without --tls-ca.
absl::StatusOr<ChannelOptions> ChannelOptionsFromFlags(const Flags& flags, std::string addr);
// The PEM files are read here: NOT_FOUND naming a missing one.
absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ChannelOptions& options,
                                                           const grpc::ChannelArguments& args = {});

}  // namespace steady

#endif  // STEADY_CLIENTS_COMMON_CHANNEL_H_
