// A real redis-server on 127.0.0.1 for the tests, in a directory of the test's, with its
// append-only file fsynced before every answer (as docs/deployment.md asks). Killed when destroyed.
#ifndef STEADY_TESTS_SERVER_STORE_REDIS_HARNESS_H_
#define STEADY_TESTS_SERVER_STORE_REDIS_HARNESS_H_

#include <memory>
#include <string>

namespace steady::testing {

class RedisServer {
 public:
  // nullptr when redis-server is not installed (scripts/install-deps.sh installs it).
  static std::unique_ptr<RedisServer> Start(const std::string& dir);
  ~RedisServer();

  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  // SIGKILL; Restart() brings it back on the same port and files.
  void Kill();
  bool Restart();

 private:
  RedisServer(std::string dir, int port) : dir_(std::move(dir)), port_(port) {}
  bool Launch();

  const std::string dir_;
  const int port_;
  int pid_ = -1;
};

}  // namespace steady::testing

#endif  // STEADY_TESTS_SERVER_STORE_REDIS_HARNESS_H_
