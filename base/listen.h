// A TCP socket listening on host:port (getaddrinfo's first address that binds; port 0 picks a free
// one), for the servers that own their listening sockets: steady-server's metrics endpoint and its
// gRPC port (server/rpc/listener.h).
#ifndef STEADY_BASE_LISTEN_H_
#define STEADY_BASE_LISTEN_H_

#include <string>

#include "absl/status/statusor.h"

namespace steady {

struct ListeningSocket {
  int fd = -1;    // close-on-exec, owned by the caller
  int port = 0;   // the port bound (the one picked when 0 was asked for)
};

// `what` names the socket in errors ("metrics", "gRPC").
absl::StatusOr<ListeningSocket> ListenOn(const std::string& what, const std::string& host, int port, int backlog);

}  // namespace steady

#endif  // STEADY_BASE_LISTEN_H_
