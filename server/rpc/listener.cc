#include "server/rpc/listener.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "base/listen.h"

namespace steady {

absl::StatusOr<std::unique_ptr<ConnectionListener>> ConnectionListener::Open(const std::string& host, int port) {
  auto socket = ListenOn("gRPC", host, port, SOMAXCONN);
  if (!socket.ok()) return socket.status();
  // Non-blocking, so that Close can take whatever is queued and stop at the first "none".
  fcntl(socket->fd, F_SETFL, fcntl(socket->fd, F_GETFL) | O_NONBLOCK);
  return std::unique_ptr<ConnectionListener>(new ConnectionListener(socket->fd, socket->port));
}

ConnectionListener::ConnectionListener(int fd, int port) : fd_(fd), port_(port) {
  if (pipe2(wake_pipe_, O_CLOEXEC) != 0) wake_pipe_[0] = wake_pipe_[1] = -1;
}

ConnectionListener::~ConnectionListener() {
  Close();
  for (int fd : wake_pipe_) {
    if (fd >= 0) close(fd);
  }
}

void ConnectionListener::Start(grpc::experimental::ExternalConnectionAcceptor* acceptor) {
  thread_ = std::thread([this, acceptor] { Serve(acceptor); });
}

bool ConnectionListener::AcceptOne(grpc::experimental::ExternalConnectionAcceptor* acceptor) {
  // gRPC takes the descriptor as its own accept4 would give it: non-blocking, close-on-exec.
  const int fd = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EINTR || errno == ECONNABORTED) return true;
    // Out of descriptors or memory: the connection stays queued, and poll would report it at once;
    // wait a little rather than spin (EAGAIN: none waiting).
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) usleep(10000);
    return false;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // as gRPC sets on its own listeners
  grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
  p.listener_fd = fd_;
  p.fd = fd;
  acceptor->HandleNewConnection(&p);  // gRPC owns fd from here
  return true;
}

void ConnectionListener::Serve(grpc::experimental::ExternalConnectionAcceptor* acceptor) {
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (poll(fds, wake_pipe_[0] >= 0 ? 2 : 1, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents != 0 || (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) break;
    if (fds[0].revents & POLLIN) {
      while (AcceptOne(acceptor)) {
      }
    }
  }
  // Close: every connection the kernel has accepted is served, not reset by the close below.
  while (AcceptOne(acceptor)) {
  }
  close(fd_);
}

void ConnectionListener::Close() {
  if (!thread_.joinable()) {  // never started, or closed already
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return;
  }
  const char byte = 0;
  if (wake_pipe_[1] < 0 || write(wake_pipe_[1], &byte, 1) != 1) shutdown(fd_, SHUT_RDWR);  // wakes poll
  thread_.join();
  fd_ = -1;
}

}  // namespace steady
