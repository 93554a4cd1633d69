// steady-server's gRPC port, listened on here rather than by gRPC, so that a drain can stop taking
// connections without losing a call on a connection already taken.
//
// Why: gRPC's Server::Shutdown closes its listener and sends GOAWAY on every connection at once. A
// balancer such as nginx opens a connection per call; one that was accepted (by the kernel, or by
// gRPC) just before the shutdown has its call refused or reset after the balancer sent it, and
// nginx cannot send a call on to another replica once it has sent it: the client sees an error
// (measured: a few calls a drain under a storm of one-call connections, tests/cli/drain_storm.py).
// So the drain closes this listener first (every connection the kernel had already accepted is
// taken and served, later ones are refused, which a balancer answers by trying another replica),
// then waits a moment for the calls on the connections it took, and only then shuts gRPC down.
#ifndef STEADY_SERVER_RPC_LISTENER_H_
#define STEADY_SERVER_RPC_LISTENER_H_

#include <memory>
#include <string>
#include <thread>

#include <grpcpp/server_builder.h>

#include "absl/status/statusor.h"

namespace steady {

class ConnectionListener {
 public:
  // Listens on host:port (0: a free port, see port()).
  static absl::StatusOr<std::unique_ptr<ConnectionListener>> Open(const std::string& host, int port);
  ~ConnectionListener();  // Close()

  int port() const { return port_; }
  // Hands each connection to `acceptor` (from ServerBuilder::experimental().AddExternalConnectionAcceptor,
  // which must outlive this listener's Close) on a thread of its own until Close.
  void Start(grpc::experimental::ExternalConnectionAcceptor* acceptor);
  // Stops listening: takes every connection already waiting to be accepted, then closes the socket,
  // so a later connection is refused and none that the kernel accepted is reset. Idempotent.
  void Close();

 private:
  ConnectionListener(int fd, int port);
  void Serve(grpc::experimental::ExternalConnectionAcceptor* acceptor);
  // Accepts one connection and hands it over; false when none is waiting.
  bool AcceptOne(grpc::experimental::ExternalConnectionAcceptor* acceptor);

  int fd_;
  int port_;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace steady

#endif  // STEADY_SERVER_RPC_LISTENER_H_
