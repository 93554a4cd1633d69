#include "server/store/redis_store.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"

namespace steady {

namespace {

// Lua scripts: each runs atomically in Redis. KEYS and ARGV as documented per script.

// KEYS: ptr, epoch. ARGV: new blob key, writer's epoch. Switches the pointer to the new blob and
// drops the old one, unless the session was taken over since (the new blob is dropped instead).
constexpr char kCommit[] = R"(
if redis.call('GET', KEYS[2]) ~= ARGV[2] then
  redis.call('DEL', ARGV[1])
  return redis.error_reply('FENCED epoch ' .. tostring(redis.call('GET', KEYS[2])))
end
local old = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1])
if old and old ~= ARGV[1] then redis.call('DEL', old) end
return 'OK'
)";

// KEYS: ptr. ARGV: none or the byte count. The current blob, or its first ARGV[1] bytes; nil when none.
constexpr char kRead[] = R"(
local b = redis.call('GET', KEYS[1])
if not b then return false end
if ARGV[1] then return redis.call('GETRANGE', b, 0, tonumber(ARGV[1]) - 1) end
return redis.call('GET', b)
)";

// KEYS: ptr, epoch, lease. ARGV: writer's epoch. Deletes the session (not its epoch: a recreated
// session keeps counting, so an old owner stays fenced).
constexpr char kDelete[] = R"(
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return redis.error_reply('FENCED epoch ' .. tostring(redis.call('GET', KEYS[2])))
end
local b = redis.call('GET', KEYS[1])
if b then redis.call('DEL', b) end
redis.call('DEL', KEYS[1], KEYS[3])
return 'OK'
)";

// KEYS: lease, epoch. ARGV: owner, ttl ms. Keeps this owner's lease (same epoch) or takes a free one
// (a new epoch); an error "HELD <owner> <ms left>" while another owner's lease lives.
constexpr char kAcquire[] = R"(
local cur = redis.call('GET', KEYS[1])
if cur then
  local owner, epoch = string.match(cur, '^(.*) (%d+)$')
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(epoch)
  end
  return redis.error_reply('HELD ' .. owner .. ' ' .. redis.call('PTTL', KEYS[1]))
end
local epoch = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. epoch, 'PX', ARGV[2])
return epoch
)";

// KEYS: lease. ARGV: "<owner> <epoch>", ttl ms (renew) or nothing (release). 1 when it was ours.
constexpr char kRenew[] = R"(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) else redis.call('DEL', KEYS[1]) end
return 1
)";

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

}  // namespace

absl::StatusOr<RedisAddress> ParseRedisUrl(const std::string& url) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("session store \"", url, "\": expected redis://HOST:PORT[/DB]"));
  };
  constexpr char kScheme[] = "redis://";
  if (url.rfind(kScheme, 0) != 0) return bad();
  std::string rest = url.substr(sizeof(kScheme) - 1);
  RedisAddress a;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    if (!absl::SimpleAtoi(rest.substr(slash + 1), &a.db) || a.db < 0) return bad();
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos) {
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &a.port) || a.port <= 0 || a.port > 65535) return bad();
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return bad();
  a.host = rest;
  return a;
}

// One hiredis connection, reconnected on demand; commands as argv vectors (binary safe). Errors
// are UNAVAILABLE naming the URL when Redis cannot be reached, INTERNAL for a Redis error reply.
class RedisConnection {
 public:
  RedisConnection(RedisAddress address, std::string url, int64_t timeout_ms)
      : address_(std::move(address)), url_(std::move(url)), timeout_ms_(timeout_ms) {}
  ~RedisConnection() {
    if (ctx_) redisFree(ctx_);
  }

  // Sends every command, then reads every reply (one round trip). A broken connection is retried
  // once on a fresh one, before anything was read.
  std::vector<absl::StatusOr<Reply>> Pipeline(const std::vector<std::vector<std::string>>& commands) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (absl::Status s = Connect(); !s.ok()) {
        std::vector<absl::StatusOr<Reply>> failed;
        for (size_t i = 0; i < commands.size(); ++i) failed.push_back(s);
        return failed;
      }
      bool sent = true;
      for (const auto& argv : commands) {
        std::vector<const char*> args;
        std::vector<size_t> lens;
        for (const std::string& a : argv) {
          args.push_back(a.data());
          lens.push_back(a.size());
        }
        if (redisAppendCommandArgv(ctx_, int(args.size()), args.data(), lens.data()) != REDIS_OK) sent = false;
      }
      std::vector<absl::StatusOr<Reply>> replies;
      bool broken = !sent;
      for (size_t i = 0; i < commands.size() && !broken; ++i) {
        void* raw = nullptr;
        if (redisGetReply(ctx_, &raw) != REDIS_OK) {
          broken = true;
          break;
        }
        Reply r(static_cast<redisReply*>(raw));
        if (r->type == REDIS_REPLY_ERROR) {
          const std::string error(r->str, r->len);
          // A Redis that is starting (LOADING its append-only file) or busy answers again soon.
          const bool transient = error.rfind("LOADING", 0) == 0 || error.rfind("BUSY", 0) == 0 ||
                                 error.rfind("TRYAGAIN", 0) == 0 || error.rfind("MASTERDOWN", 0) == 0;
          replies.push_back(transient ? Unavailable(error) : absl::InternalError(error));
        } else {
          replies.push_back(std::move(r));
        }
      }
      if (!broken) return replies;
      const absl::Status lost = Unavailable(ctx_->errstr);
      redisFree(ctx_);
      ctx_ = nullptr;
      if (!replies.empty() || attempt == 1) {
        // Some replies were read (or a second connection broke too): the rest are unknown.
        while (replies.size() < commands.size()) replies.push_back(lost);
        return replies;
      }
    }
    return {};
  }

  absl::StatusOr<Reply> Command(const std::vector<std::string>& argv) { return std::move(Pipeline({argv})[0]); }

  absl::Status Unavailable(const std::string& why) const {
    return absl::UnavailableError(absl::StrCat("the session store ", url_, " is unavailable: ", why));
  }

 private:
  absl::Status Connect() {
    if (ctx_) return absl::OkStatus();
    const timeval tv{timeout_ms_ / 1000, (timeout_ms_ % 1000) * 1000};
    ctx_ = redisConnectWithTimeout(address_.host.c_str(), address_.port, tv);
    if (ctx_ == nullptr || ctx_->err) {
      const absl::Status s = Unavailable(ctx_ ? ctx_->errstr : "out of memory");
      if (ctx_) redisFree(ctx_);
      ctx_ = nullptr;
      return s;
    }
    redisSetTimeout(ctx_, tv);
    if (address_.db != 0) {
      Reply r(static_cast<redisReply*>(redisCommand(ctx_, "SELECT %d", address_.db)));
      if (!r || r->type == REDIS_REPLY_ERROR) {
        const absl::Status s = Unavailable(r ? std::string(r->str, r->len) : std::string(ctx_->errstr));
        redisFree(ctx_);
        ctx_ = nullptr;
        return s;
      }
    }
    return absl::OkStatus();
  }

  const RedisAddress address_;
  const std::string url_;
  const int64_t timeout_ms_;
  redisContext* ctx_ = nullptr;
};

RedisStore::RedisStore(RedisStoreOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<RedisStore>> RedisStore::Open(const RedisStoreOptions& options) {
  auto address = ParseRedisUrl(options.url);
  if (!address.ok()) return address.status();
  std::unique_ptr<RedisStore> store(new RedisStore(options));
  store->conn_ = std::make_unique<RedisConnection>(*address, options.url, options.timeout_ms);
  store->renew_ = std::make_unique<RedisConnection>(*address, options.url, options.timeout_ms);
  auto pong = store->conn_->Command({"PING"});
  if (!pong.ok()) return pong.status();
  // Acknowledged means durable only if Redis fsyncs its append-only file before it answers.
  auto fsync = store->conn_->Command({"CONFIG", "GET", "appendfsync"});
  auto aof = store->conn_->Command({"CONFIG", "GET", "appendonly"});
  if (fsync.ok() && aof.ok() && (*fsync)->elements == 2 && (*aof)->elements == 2 &&
      (std::string((*aof)->element[1]->str) != "yes" || std::string((*fsync)->element[1]->str) != "always")) {
    std::fprintf(stderr,
                 "steady: warning: %s runs with appendonly %s, appendfsync %s: acknowledged turns survive a "
                 "steady-server crash but not a Redis crash (run it with --appendonly yes --appendfsync always)\n",
                 options.url.c_str(), (*aof)->element[1]->str, (*fsync)->element[1]->str);
  }
  store->renewer_ = std::thread([s = store.get()] { s->RenewLoop(); });
  return store;
}

RedisStore::~RedisStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (renewer_.joinable()) renewer_.join();
  std::vector<std::string> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, epoch] : held_) keys.push_back(key);
  }
  for (const std::string& key : keys) Release(key);
}

std::vector<absl::Status> RedisStore::Put(const std::vector<BlobWrite>& writes) {
  std::vector<absl::Status> statuses(writes.size());
  std::vector<std::vector<std::string>> sets, commits;
  std::vector<size_t> which;
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (size_t i = 0; i < writes.size(); ++i) {
      auto it = held_.find(writes[i].key);
      if (it == held_.end() && lost_.count(writes[i].key)) {
        lock.unlock();
        absl::Status retaken = Retake(writes[i].key);
        lock.lock();
        if (retaken.code() == absl::StatusCode::kUnavailable) {  // the store is away: try again later
          statuses[i] = retaken;
          continue;
        }
        it = held_.find(writes[i].key);
      }
      if (it == held_.end()) {
        statuses[i] = absl::AbortedError(absl::StrCat("session ", writes[i].key,
                                                      ": this server no longer holds it (another took it over)"));
        continue;
      }
      const std::string blob = absl::StrCat(options_.key_prefix, "blob:", writes[i].key, ":", options_.owner, ":",
                                            ++next_blob_);
      sets.push_back({"SET", blob, writes[i].blob});
      commits.push_back({"EVAL", kCommit, "2", options_.key_prefix + "ptr:" + writes[i].key,
                         options_.key_prefix + "epoch:" + writes[i].key, blob, std::to_string(it->second)});
      which.push_back(i);
    }
  }
  if (which.empty()) return statuses;
  const auto start = std::chrono::steady_clock::now();
  // Blobs first (each under a name no reader knows yet), then every pointer switch: one round trip each.
  const auto set_replies = conn_->Pipeline(sets);
  std::vector<std::vector<std::string>> ready;
  std::vector<size_t> ready_which;
  for (size_t j = 0; j < which.size(); ++j) {
    if (!set_replies[j].ok()) {
      statuses[which[j]] = set_replies[j].status();
      continue;
    }
    ready.push_back(commits[j]);
    ready_which.push_back(which[j]);
  }
  const auto commit_replies = conn_->Pipeline(ready);
  stats_.sync_seconds.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  for (size_t j = 0; j < ready.size(); ++j) {
    absl::Status s = commit_replies[j].status();
    if (!s.ok() && std::string(s.message()).rfind("FENCED", 0) == 0) {
      s = absl::AbortedError(absl::StrCat("session ", writes[ready_which[j]].key,
                                          ": another server has taken it over since (", std::string(s.message()),
                                          "); this server's write was refused"));
      std::lock_guard<std::mutex> lock(mu_);
      held_.erase(writes[ready_which[j]].key);
    }
    statuses[ready_which[j]] = s;
  }
  CountWrites(writes, statuses);
  return statuses;
}

absl::StatusOr<std::string> RedisStore::Get(const std::string& key) const {
  auto r = conn_->Command({"EVAL", kRead, "1", options_.key_prefix + "ptr:" + key});
  if (!r.ok()) return r.status();
  if ((*r)->type != REDIS_REPLY_STRING) return absl::NotFoundError(absl::StrCat("session ", key, ": not in the ", Describe()));
  return std::string((*r)->str, (*r)->len);
}

absl::StatusOr<std::string> RedisStore::Head(const std::string& key, size_t bytes) const {
  auto r = conn_->Command({"EVAL", kRead, "1", options_.key_prefix + "ptr:" + key, std::to_string(bytes)});
  if (!r.ok()) return r.status();
  if ((*r)->type != REDIS_REPLY_STRING) return absl::NotFoundError(absl::StrCat("session ", key, ": not in the ", Describe()));
  return std::string((*r)->str, (*r)->len);
}

absl::Status RedisStore::Delete(const std::string& key) {
  uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = held_.find(key);
    if (it == held_.end()) return absl::AbortedError(absl::StrCat("session ", key, ": this server does not hold it"));
    epoch = it->second;
  }
  auto r = conn_->Command({"EVAL", kDelete, "3", options_.key_prefix + "ptr:" + key, options_.key_prefix + "epoch:" + key,
                           options_.key_prefix + "lease:" + key, std::to_string(epoch)});
  std::lock_guard<std::mutex> lock(mu_);
  if (!r.ok()) {
    if (std::string(r.status().message()).rfind("FENCED", 0) != 0) return r.status();
    held_.erase(key);
    return absl::AbortedError(absl::StrCat("session ", key, ": another server has taken it over since"));
  }
  held_.erase(key);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RedisStore::List() const {
  const std::string prefix = options_.key_prefix + "ptr:";
  std::vector<std::string> keys;
  std::string cursor = "0";
  do {
    auto r = conn_->Command({"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"});
    if (!r.ok()) return r.status();
    if ((*r)->type != REDIS_REPLY_ARRAY || (*r)->elements != 2) return absl::InternalError("SCAN: unexpected reply");
    cursor.assign((*r)->element[0]->str, (*r)->element[0]->len);
    const redisReply* batch = (*r)->element[1];
    for (size_t i = 0; i < batch->elements; ++i) {
      keys.emplace_back(batch->element[i]->str + prefix.size(), batch->element[i]->len - prefix.size());
    }
  } while (cursor != "0");
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());  // SCAN may repeat a key
  return keys;
}

absl::Status RedisStore::Retake(const std::string& key) {
  const absl::Status taken = absl::AbortedError(absl::StrCat("session ", key, ": another server has taken it over"));
  uint64_t lost = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = lost_.find(key);
    if (it == lost_.end()) return taken;
    lost = it->second;
  }
  const absl::Status acquired = Acquire(key);
  // The store did not answer (a lease refusal is UNAVAILABLE too, but carries the holder's time left):
  // the lease stays lost, to be retaken later.
  if (acquired.code() == absl::StatusCode::kUnavailable && !RetryAfterMs(acquired)) return acquired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lost_.erase(key);
  }
  if (!acquired.ok()) return taken;
  // Every acquisition increments the epoch: one more than ours means nobody held it in between.
  if (EpochOf(key) == lost + 1) return absl::OkStatus();
  Release(key);
  return taken;
}

absl::Status RedisStore::Acquire(const std::string& key) {
  auto r = conn_->Command({"EVAL", kAcquire, "2", options_.key_prefix + "lease:" + key,
                           options_.key_prefix + "epoch:" + key, options_.owner, std::to_string(options_.lease_ms)});
  if (!r.ok()) {
    const std::string m(r.status().message());
    if (m.rfind("HELD ", 0) != 0) return r.status();
    // "HELD <owner> <ms left>": served by another replica, which may be alive or may have died. The
    // lease's remaining time is when a takeover may succeed (the engine waits for it).
    const size_t last = m.rfind(' ');
    int64_t ms_left = 0;
    if (!absl::SimpleAtoi(m.substr(last + 1), &ms_left) || ms_left < 0) ms_left = 0;
    return WithRetryAfterMs(absl::UnavailableError(absl::StrCat("session ", key, " is served by ", m.substr(5, last - 5),
                                                                " (its lease runs ", ms_left, " ms more unless renewed)")),
                            ms_left);
  }
  std::lock_guard<std::mutex> lock(mu_);
  held_[key] = uint64_t((*r)->integer);
  lost_.erase(key);
  return absl::OkStatus();
}

void RedisStore::Release(const std::string& key) {
  uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = held_.find(key);
    if (it == held_.end()) return;
    epoch = it->second;
    held_.erase(it);
    lost_.erase(key);
  }
  (void)conn_->Command({"EVAL", kRenew, "1", options_.key_prefix + "lease:" + key,
                        absl::StrCat(options_.owner, " ", epoch)});
}

bool RedisStore::Holds(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_.count(key) > 0;
}

uint64_t RedisStore::EpochOf(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(key);
  return it == held_.end() ? 0 : it->second;
}

void RedisStore::RenewLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(options_.lease_ms / 3, 10)));
    if (stop_) break;
    const std::map<std::string, uint64_t> held = held_;
    lock.unlock();
    std::vector<std::vector<std::string>> renewals;
    std::vector<std::string> keys;
    for (const auto& [key, epoch] : held) {
      keys.push_back(key);
      renewals.push_back({"EVAL", kRenew, "1", options_.key_prefix + "lease:" + key,
                          absl::StrCat(options_.owner, " ", epoch), std::to_string(options_.lease_ms)});
    }
    const auto replies = renewals.empty() ? std::vector<absl::StatusOr<Reply>>{} : renew_->Pipeline(renewals);
    lock.lock();
    for (size_t i = 0; i < keys.size(); ++i) {
      // A lease found taken over is lost; a store that did not answer leaves the lease as it was
      // (the writes' fencing catches a takeover in the meantime).
      if (replies[i].ok() && (*replies[i])->type == REDIS_REPLY_INTEGER && (*replies[i])->integer == 0) {
        auto it = held_.find(keys[i]);
        if (it != held_.end() && it->second == held.at(keys[i])) {
          lost_[keys[i]] = it->second;
          held_.erase(it);
        }
      }
    }
  }
}

}  // namespace steady
