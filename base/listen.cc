#include "base/listen.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace steady {

absl::StatusOr<ListeningSocket> ListenOn(const std::string& what, const std::string& host, int port, int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addrs = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &addrs); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " host \"", host, "\": ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string error = "no address";
  for (addrinfo* a = addrs; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, backlog) == 0) break;
    error = std::strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(addrs);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(what, ": cannot listen on ", host, ":", port, ": ", error));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return ListeningSocket{fd, bound_port};
}

}  // namespace steady
