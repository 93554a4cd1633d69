#include "server/metrics/metrics.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/listen.h"

namespace steady {

namespace {

void AppendHeader(std::string* out, const char* name, const char* type, const char* help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

// Speculative decoding (docs/speculative.md): drafted and accepted counters, and the histogram of
// the drafts one verify step accepted (its _sum is the accepted tokens, its _count the verify steps;
// the acceptance rate is accepted / drafted).
void AppendSpeculation(const Engine::Stats& engine, std::string* out) {
  AppendHeader(out, "steady_speculative_draft_tokens_total", "counter", "Draft tokens verified by speculative decoding.");
  absl::StrAppend(out, "steady_speculative_draft_tokens_total ", engine.drafted_tokens, "\n");
  AppendHeader(out, "steady_speculative_accepted_tokens_total", "counter",
               "Draft tokens accepted (emitted without a step of their own).");
  absl::StrAppend(out, "steady_speculative_accepted_tokens_total ", engine.accepted_tokens, "\n");
  AppendHeader(out, "steady_speculative_accepted_per_verify", "histogram",
               "Draft tokens accepted by each verify step of one session.");
  static constexpr int kBounds[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32};
  int64_t cumulative = 0, count = 0;
  size_t a = 0;
  for (int bound : kBounds) {
    for (; a < engine.verify_accepted.size() && int(a) <= bound; ++a) cumulative += engine.verify_accepted[a];
    absl::StrAppend(out, "steady_speculative_accepted_per_verify_bucket{le=\"", bound, "\"} ", cumulative, "\n");
  }
  for (int64_t steps : engine.verify_accepted) count += steps;
  absl::StrAppend(out, "steady_speculative_accepted_per_verify_bucket{le=\"+Inf\"} ", count, "\n");
  absl::StrAppend(out, "steady_speculative_accepted_per_verify_sum ", engine.accepted_tokens, "\n");
  absl::StrAppend(out, "steady_speculative_accepted_per_verify_count ", count, "\n");
}

}  // namespace

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      inter_token_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}) {}

void Metrics::CountRequest(const std::string& rpc, const std::string& code) {
  std::lock_guard lock(mu_);
  ++requests_[{rpc, code}];
}

void Metrics::CountAuthFailure(const std::string& reason) {
  std::lock_guard lock(mu_);
  ++auth_failures_[reason];
}

void Metrics::CountQuotaRefusal(const std::string& tenant, const std::string& quota) {
  std::lock_guard lock(mu_);
  ++quota_refusals_[{tenant, quota}];
}

void Metrics::ObserveTimeToFirstToken(double seconds) { ttft_.Observe(seconds); }
void Metrics::ObserveInterTokenLatency(double seconds) { inter_token_.Observe(seconds); }

std::string Metrics::Render(const Engine::Stats& engine, const SessionStore* store) const {
  std::string out;
  AppendHeader(&out, "steady_requests_total", "counter", "Finished RPCs by method and status code.");
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, count] : requests_) {
      absl::StrAppend(&out, "steady_requests_total{rpc=\"", key.first, "\",code=\"", key.second, "\"} ", count, "\n");
    }
  }
  {
    std::lock_guard lock(mu_);
    AppendHeader(&out, "steady_auth_failures_total", "counter", "Calls refused for their API key, by reason.");
    for (const auto& [reason, count] : auth_failures_) {
      absl::StrAppend(&out, "steady_auth_failures_total{reason=\"", reason, "\"} ", count, "\n");
    }
    AppendHeader(&out, "steady_quota_refusals_total", "counter", "Calls refused over a tenant's quota.");
    for (const auto& [key, count] : quota_refusals_) {
      absl::StrAppend(&out, "steady_quota_refusals_total{tenant=\"", key.first, "\",quota=\"", key.second, "\"} ",
                      count, "\n");
    }
  }
  AppendHeader(&out, "steady_prompt_tokens_total", "counter", "Prompt tokens absorbed into session states.");
  absl::StrAppend(&out, "steady_prompt_tokens_total ", engine.tokens_in, "\n");
  AppendHeader(&out, "steady_generated_tokens_total", "counter", "Tokens sampled.");
  absl::StrAppend(&out, "steady_generated_tokens_total ", engine.tokens_out, "\n");
  AppendHeader(&out, "steady_time_to_first_token_seconds", "histogram",
               "From the Generate call to its first sampled token.");
  ttft_.Render("steady_time_to_first_token_seconds", &out);
  AppendHeader(&out, "steady_inter_token_latency_seconds", "histogram",
               "Time between consecutive sampled tokens of one Generate call.");
  inter_token_.Render("steady_inter_token_latency_seconds", &out);
  AppendSpeculation(engine, &out);
  AppendHeader(&out, "steady_queue_depth", "gauge", "Generate calls waiting for the engine.");
  absl::StrAppend(&out, "steady_queue_depth ", engine.queue_depth, "\n");
  AppendHeader(&out, "steady_sessions", "gauge", "Sessions by where their state lives.");
  absl::StrAppend(&out, "steady_sessions{state=\"resident\"} ", engine.sessions_resident, "\n");
  absl::StrAppend(&out, "steady_sessions{state=\"offloaded\"} ", engine.sessions_offloaded, "\n");
  AppendHeader(&out, "steady_state_bytes", "gauge", "Bytes held by resident session states.");
  absl::StrAppend(&out, "steady_state_bytes ", engine.state_bytes, "\n");
  AppendHeader(&out, "steady_engine_steps_total", "counter", "Engine steps (batched forward passes).");
  absl::StrAppend(&out, "steady_engine_steps_total ", engine.steps, "\n");
  AppendHeader(&out, "steady_engine_step_seconds", "gauge", "Duration of the last engine step.");
  absl::StrAppend(&out, "steady_engine_step_seconds ", absl::StrFormat("%.9g", engine.last_step_seconds), "\n");
  AppendHeader(&out, "steady_prefix_cache_lookups_total", "counter",
               "Requests on an empty session that looked for a cached prompt prefix, by result.");
  absl::StrAppend(&out, "steady_prefix_cache_lookups_total{result=\"hit\"} ", engine.prefix_hits, "\n");
  absl::StrAppend(&out, "steady_prefix_cache_lookups_total{result=\"miss\"} ", engine.prefix_misses, "\n");
  AppendHeader(&out, "steady_prefix_cache_tokens_saved_total", "counter",
               "Prompt tokens started from a cached state instead of prefilled.");
  absl::StrAppend(&out, "steady_prefix_cache_tokens_saved_total ", engine.prefix_tokens_saved, "\n");
  AppendHeader(&out, "steady_prefix_cache_entries", "gauge", "States in the prefix cache.");
  absl::StrAppend(&out, "steady_prefix_cache_entries ", engine.prefix_entries, "\n");
  AppendHeader(&out, "steady_prefix_cache_bytes", "gauge", "Bytes the prefix cache holds.");
  absl::StrAppend(&out, "steady_prefix_cache_bytes ", engine.prefix_bytes, "\n");
  AppendHeader(&out, "steady_turns_total", "counter",
               "Turns answered with the session's stored last turn (replayed: a resend with expected_position of "
               "a turn already applied), and all_or_nothing turns rolled back because they did not complete "
               "(rolled_back: cancelled, their stream broken, an error).");
  absl::StrAppend(&out, "steady_turns_total{result=\"replayed\"} ", engine.turns_replayed, "\n");
  absl::StrAppend(&out, "steady_turns_total{result=\"rolled_back\"} ", engine.turns_rolled_back, "\n");
  if (store == nullptr) return out;
  const StoreStats& st = store->stats();
  AppendHeader(&out, "steady_durable_turns_total", "counter",
               "Finished Generate calls whose state reached the session store before they were acknowledged "
               "(committed), or could not (failed: undone and reported).");
  absl::StrAppend(&out, "steady_durable_turns_total{result=\"committed\"} ", engine.turns_committed, "\n");
  absl::StrAppend(&out, "steady_durable_turns_total{result=\"failed\"} ", engine.commit_failures, "\n");
  if (store->Shared()) {
    AppendHeader(&out, "steady_store_waits_total", "counter",
                 "Calls that waited for a shared session store: for another replica's lease on their session "
                 "to lapse or be let go, or for the store to answer.");
    absl::StrAppend(&out, "steady_store_waits_total ", engine.store_waits, "\n");
    AppendHeader(&out, "steady_store_waits_failed_total", "counter",
                 "Calls that waited for a shared session store and failed after --takeover-wait-ms (the session's "
                 "replica kept it, or the store stayed away).");
    absl::StrAppend(&out, "steady_store_waits_failed_total ", engine.store_waits_failed, "\n");
  }
  AppendHeader(&out, "steady_store_bytes_written_total", "counter", "Snapshot bytes written to the session store.");
  absl::StrAppend(&out, "steady_store_bytes_written_total ", st.bytes_written.load(), "\n");
  AppendHeader(&out, "steady_store_blobs_written_total", "counter", "Snapshots written to the session store.");
  absl::StrAppend(&out, "steady_store_blobs_written_total ", st.blobs_written.load(), "\n");
  AppendHeader(&out, "steady_store_write_errors_total", "counter", "Snapshot writes the session store refused.");
  absl::StrAppend(&out, "steady_store_write_errors_total ", st.write_errors.load(), "\n");
  AppendHeader(&out, "steady_store_fsync_seconds", "histogram", "Duration of each fsync the session store made.");
  st.sync_seconds.Render("steady_store_fsync_seconds", &out);
  AppendHeader(&out, "steady_recovery_seconds", "gauge", "Time the engine took at start to recover the stored sessions.");
  absl::StrAppend(&out, "steady_recovery_seconds ", absl::StrFormat("%.9g", engine.recovery_seconds), "\n");
  AppendHeader(&out, "steady_recovery_sessions", "gauge",
               "Sessions found in the store at start: recovered, or unreadable (answering DATA_LOSS).");
  absl::StrAppend(&out, "steady_recovery_sessions{result=\"recovered\"} ", engine.sessions_recovered, "\n");
  absl::StrAppend(&out, "steady_recovery_sessions{result=\"unreadable\"} ", engine.sessions_unreadable, "\n");
  AppendHeader(&out, "steady_recovery_dropped_writes", "gauge",
               "Incomplete writes a crash left in the store, removed at start (their sessions keep the previous state).");
  absl::StrAppend(&out, "steady_recovery_dropped_writes ", st.dropped_at_open.load(), "\n");
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& host, int port,
                                                                            std::function<std::string()> render) {
  auto socket = ListenOn("metrics", host, port, 16);
  if (!socket.ok()) return socket.status();
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(socket->fd, socket->port, std::move(render)));
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int port, std::function<std::string()> render)
    : listen_fd_(listen_fd), port_(port), render_(std::move(render)) {
  if (pipe2(wake_pipe_, O_CLOEXEC) != 0) wake_pipe_[0] = wake_pipe_[1] = -1;
  thread_ = std::thread([this] { Serve(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  const char byte = 0;
  if (wake_pipe_[1] >= 0 && write(wake_pipe_[1], &byte, 1) != 1) {
    shutdown(listen_fd_, SHUT_RDWR);  // fallback wake-up: accept fails
  }
  thread_.join();
  close(listen_fd_);
  for (int fd : wake_pipe_) {
    if (fd >= 0) close(fd);
  }
}

void MetricsHttpServer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (poll(fds, wake_pipe_[0] >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    HandleConnection(fd);
    close(fd);
  }
}

void MetricsHttpServer::HandleConnection(int fd) {
  // Reads the request head (bounded in size and time: a stuck client cannot hold the thread long).
  std::string head;
  char buf[1024];
  while (head.find("\r\n\r\n") == std::string::npos && head.find("\n\n") == std::string::npos &&
         head.size() < 8192) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) return;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    head.append(buf, size_t(n));
  }
  const std::string line = head.substr(0, head.find_first_of("\r\n"));
  std::string status = "404 Not Found", type = "text/plain; charset=utf-8", body = "not found\n";
  if (line.rfind("GET /metrics ", 0) == 0 || line.rfind("GET /metrics?", 0) == 0 || line == "GET /metrics") {
    status = "200 OK";
    type = "text/plain; version=0.0.4; charset=utf-8";
    body = render_();
  }
  const std::string response = absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                                            "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  size_t sent = 0;
  while (sent < response.size()) {
    pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, 2000) <= 0) return;
    const ssize_t n = send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += size_t(n);
  }
}

}  // namespace steady
