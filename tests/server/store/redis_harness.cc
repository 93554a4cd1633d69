#include "tests/server/store/redis_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

extern char** environ;

namespace steady::testing {
namespace {

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

bool Accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

std::unique_ptr<RedisServer> RedisServer::Start(const std::string& dir) {
  if (::access("/usr/bin/redis-server", X_OK) != 0) return nullptr;
  const int port = FreePort();
  if (port <= 0) return nullptr;
  std::unique_ptr<RedisServer> server(new RedisServer(dir, port));
  if (!server->Launch()) return nullptr;
  return server;
}

bool RedisServer::Launch() {
  const std::string port = std::to_string(port_);
  std::vector<std::string> args = {"/usr/bin/redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", dir_,
                                   "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                                   "--daemonize", "no", "--logfile", dir_ + "/redis.log"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return false;
  pid_ = pid;
  for (int i = 0; i < 800 && !Accepts(port_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));  // 20 s: a loaded CI machine
  return Accepts(port_);
}

void RedisServer::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

bool RedisServer::Restart() {
  Kill();
  return Launch();
}

RedisServer::~RedisServer() { Kill(); }

}  // namespace steady::testing
