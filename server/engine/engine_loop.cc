// The engine thread: its loop, accepting jobs, one step over every runnable job, finishing jobs,
// and the shutdown that persists every session. Session operations are in engine_sessions.cc.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status.h"
#include "server/engine/engine_impl.h"
#include "model/generate.h"
#include "server/engine/request_checks.h"

namespace steady {

void Engine::Impl::Run() {
  bool idle = false;
  for (;;) {
    std::vector<std::function<void()>> work;
    {
      std::unique_lock<std::mutex> lock(mu);
      auto woken = [&] { return stop_requested || !inbox.empty(); };
      // How long to sleep (nullopt: until woken). With jobs in flight that cannot run now, poll:
      // cancellation flags come without a notification.
      std::optional<int64_t> sleep_ms;
      if (jobs.empty() && options.release_idle_ms > 0) {
        sleep_ms = options.release_idle_ms / 2;
      } else if (!jobs.empty()) {
        sleep_ms = idle ? 2 : 0;
      }
      if (std::optional<int64_t> due = NextRetryMs()) {
        const int64_t until_due = std::max<int64_t>(0, *due - SteadyMs());
        sleep_ms = sleep_ms ? std::min(*sleep_ms, until_due) : until_due;
      }
      if (!sleep_ms) {
        cv.wait(lock, woken);
      } else if (*sleep_ms > 0) {
        cv.wait_for(lock, std::chrono::milliseconds(*sleep_ms), woken);
      }
      work.swap(inbox);
      stopping = stop_requested;
    }
    for (auto& fn : work) fn();
    if (stopping) break;
    RetryWaiting();
    idle = !Step();
    CommitTurns();
    ReleaseIdle();
  }
  Shutdown();
}

void Engine::Impl::TryOrWait(WaitingCall call) {
  const int64_t now = SteadyMs();
  if (call.cancelled && call.cancelled->load()) {
    return call.done(absl::CancelledError("the client cancelled the call while it waited for the session store"));
  }
  absl::Status st = stopping ? absl::UnavailableError("the engine is shutting down") : call.attempt();
  const bool turn_busy = st.GetPayload(kWaitsForTurn).has_value();
  if ((!StoreBusy(st) && !turn_busy) || stopping) return call.done(st);
  if (call.since_ms < 0) {
    call.since_ms = now;
    std::lock_guard<std::mutex> lock(stats_mu);
    stats.store_waits += !turn_busy;
  }
  const int64_t deadline = call.since_ms + (turn_busy ? std::max(options.store_wait_ms, kTurnWaitMs) : options.store_wait_ms);
  if (turn_busy && now >= deadline) {
    st.ErasePayload(kWaitsForTurn);
    return call.done(WithContext(st, absl::StrCat("waited ", now - call.since_ms, " ms for it to end")));
  }
  if (now >= deadline) {
    {
      std::lock_guard<std::mutex> lock(stats_mu);
      ++stats.store_waits_failed;
    }
    return call.done(GaveUp(st, now - call.since_ms));
  }
  // Again after a poll, or just after the holder's lease would run out (a dead holder's does).
  int64_t next = now + options.store_poll_ms;
  if (std::optional<int64_t> lease_left = RetryAfterMs(st)) next = std::min(next, now + *lease_left + 1);
  call.next_try_ms = std::min(next, deadline);
  waiting.push_back(std::move(call));
}

void Engine::Impl::RetryWaiting() {
  if (waiting.empty()) return;
  const int64_t now = SteadyMs();
  std::vector<WaitingCall> due, later;
  for (WaitingCall& c : waiting) (c.next_try_ms <= now ? due : later).push_back(std::move(c));
  waiting = std::move(later);
  for (WaitingCall& c : due) TryOrWait(std::move(c));
}

std::optional<int64_t> Engine::Impl::NextRetryMs() const {
  std::optional<int64_t> next;
  auto consider = [&next](int64_t t) { next = next ? std::min(*next, t) : t; };
  for (const WaitingCall& c : waiting) consider(c.next_try_ms);
  for (const FinishedTurn& t : to_commit) consider(t.next_try_ms);
  return next;
}

absl::Status Engine::Impl::GaveUp(const absl::Status& last, int64_t waited_ms) {
  if (RetryAfterMs(last)) {
    // The holder renewed its lease all along: it is alive, and serving the session.
    return WithContext(last, absl::StrCat("this server waited ", waited_ms, " ms for the session, but its holder "
                                          "kept renewing its lease, so it is alive: retry later, or send the "
                                          "call to that server"));
  }
  return WithContext(last, absl::StrCat("waited ", waited_ms, " ms for the session store"));
}

void Engine::Impl::ReleaseIdle() {
  if ((options.release_idle_ms <= 0 && !draining) || !Shared()) return;
  const int64_t now = NowUnixMs();
  if (!draining && now - last_idle_scan_ms < options.release_idle_ms / 4) return;
  last_idle_scan_ms = now;
  // Oldest first; the first one still in use ends the scan (draining: every idle one goes).
  while (Session* s = sessions.EvictionCandidate()) {
    if (!draining && s->last_used_unix_ms > now - options.release_idle_ms) break;
    if (absl::Status st = Offload(*s); !st.ok()) {
      std::fprintf(stderr, "steady: session %s: %s\n", s->id.c_str(), std::string(st.message()).c_str());
      break;
    }
  }
}

void Engine::Impl::Accept(GenerateJob request, std::vector<int32_t> tokens, std::vector<int64_t> cache_points) {
  struct Call {
    GenerateJob request;
    std::vector<int32_t> tokens;
    std::vector<int64_t> cache_points;
  };
  auto call = std::make_shared<Call>(Call{std::move(request), std::move(tokens), std::move(cache_points)});
  WaitingCall w;
  w.attempt = [this, call] { return TryAccept(call->request, call->tokens, call->cache_points); };
  w.done = [this, call](const absl::Status& st) {
    if (st.ok()) return;  // running: the job reports itself
    unfinished_jobs.fetch_sub(1);
    call->request.on_done(st, "", Usage{});
  };
  w.cancelled = call->request.cancelled;
  TryOrWait(std::move(w));
}

absl::Status Engine::Impl::TryAccept(GenerateJob& request, const std::vector<int32_t>& tokens,
                                     const std::vector<int64_t>& cache_points) {
  if (stopping) return absl::UnavailableError("the engine is shutting down");
  Session* s = nullptr;
  std::string key = request.session_id;
  if (key.empty()) {
    // An ephemeral session needs a slot that no named session can hold forever.
    if (!store() && sessions.named_sessions() >= pool->slots()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "all ", pool->slots(), " state slots hold sessions and there is no session store to offload to"));
    }
    key = absl::StrCat("\x01", "ephemeral-", next_ephemeral++);  // never a valid client id
  } else {
    auto found = LookupToChange(key, "session_id");
    if (!found.ok()) return found.status();
    s = *found;
    if (s->job != 0) {
      absl::Status busy = absl::FailedPreconditionError(absl::StrCat("session_id: ", key, " is already running a Generate"));
      // A resend (expected_position) can overtake the end of the attempt it replaces, whose broken
      // stream this server has not noticed yet: it waits for the running turn, then the session's
      // position decides (run, replay or ABORTED).
      if (request.expected_position) busy.SetPayload(kWaitsForTurn, absl::Cord());
      return busy;
    }
  }
  // A refusal from here on leaves the session as it was; with a shared store, one that is not
  // resident gives back the lease LookupToChange took (a resident one goes with ReleaseIdle).
  auto refuse = [&](absl::Status st) {
    if (s && Shared() && s->slot < 0) store()->Release(key);
    return st;
  };
  if (s) {
    // A softmax session grows: a tenant already over its state bytes gets no more.
    const SessionQuota& q = request.quota;
    if (absl::Status st = CheckQuota({q.tenant, 0, q.max_state_bytes}, 0, 0); !st.ok()) return refuse(st);
  }
  std::vector<int32_t> prompt;
  const int64_t position = s ? Position(*s) : 0;
  if (request.expected_position && *request.expected_position != position) {
    if (std::optional<TurnRecord> turn = s ? ResentTurn(*s, request) : std::nullopt) {
      Replay(request, *turn);
      return refuse(absl::OkStatus());
    }
    return refuse(absl::AbortedError(absl::StrCat("session_id: ", key, " is at position ", position,
                                                  ", not the expected ", *request.expected_position,
                                                  " (an earlier attempt of this turn may have been applied)")));
  }
  // The model's BOS, when its tokenizer puts one in front, unless the prompt begins with it (a chat
  // template writes it as text).
  const int bos = tokenizer.prepends_bos() ? model.config().bos_token_id : -1;
  if (position == 0 && bos >= 0 && (tokens.empty() || tokens[0] != bos)) {
    prompt.push_back(bos);
  }
  prompt.insert(prompt.end(), tokens.begin(), tokens.end());
  if (prompt.empty()) {
    return refuse(absl::InvalidArgumentError("prompt: empty, and the model has no BOS token to start from"));
  }
  for (const auto& [token, bias] : request.sampling.logit_bias) {
    if (token >= model.vocab_size()) {
      return refuse(absl::InvalidArgumentError(
          absl::StrCat("logit_bias: token id ", token, " is outside the vocabulary [0, ", model.vocab_size(), ")")));
    }
  }
  if (absl::Status st = CheckReach(*pool, position + int64_t(prompt.size()) + request.max_tokens); !st.ok()) {
    return refuse(absl::Status(st.code(), absl::StrCat(st.message(), " (position ", position, " + prompt ",
                                                       prompt.size(), " + max_tokens ", request.max_tokens,
                                                       "; --max-context)")));
  }

  if (!s) {
    s = &sessions.Add(key, true);
    s->created_unix_ms = NowUnixMs();
  }
  auto job = std::make_unique<EngineJob>(next_job_id++, std::move(request), tokenizer);
  job->arrival = job->id;
  job->group = share_groups.try_emplace(job->request.quota.tenant, int64_t(share_groups.size())).first->second;
  job->session_id = key;
  job->context = prompt;
  if (!s->draft_history.empty() && job->request.speculative.value_or(options.speculative) == Speculation::kNgram) {
    job->draft_context = s->draft_history;
    job->draft_context.insert(job->draft_context.end(), prompt.begin(), prompt.end());
  }
  job->prompt = std::move(prompt);
  job->phase = s->slot >= 0 ? JobPhase::kPrefill : JobPhase::kWaiting;
  job->from_empty = position == 0;
  job->start_position = position;
  job->stored_before = s->stored;
  const size_t shift = job->prompt.size() - tokens.size();  // BOS in front
  for (int64_t p : cache_points) job->cache_points.push_back(size_t(p) + shift);
  std::sort(job->cache_points.begin(), job->cache_points.end());
  sessions.SetJob(*s, job->id);
  sessions.Touch(*s, NowUnixMs());
  if (job->phase == JobPhase::kPrefill) StartFromPrefixCache(*job, *s);
  if (job->request.on_start && !job->request.session_id.empty()) job->request.on_start(position);
  jobs.emplace(job->id, std::move(job));
  return absl::OkStatus();
}

void Engine::Impl::StartFromPrefixCache(EngineJob& job, Session& s) {
  if (!prefix_cache || !job.from_empty || job.prompt_done != 0) return;
  std::shared_ptr<const PrefixCache::Entry> hit = prefix_cache->Longest(job.prompt);
  if (!hit) return;
  RestoreSlot(hit->state, *pool, s.slot);
  job.prompt_done = hit->length;
  job.cached_tokens = int64_t(hit->length);
  job.before_prompt = empty_state;  // a cancel mid-prompt goes back to the empty session
  s.stored = false;
}

int64_t Engine::Impl::PrefillTake(const EngineJob& job, int64_t tokens) const {
  if (!prefix_cache || !job.from_empty) return tokens;
  const int64_t interval = options.prefix_cache_interval;
  int64_t next = std::min<int64_t>(int64_t(job.prompt.size()), (int64_t(job.prompt_done) / interval + 1) * interval);
  auto point = std::upper_bound(job.cache_points.begin(), job.cache_points.end(), job.prompt_done);
  if (point != job.cache_points.end()) next = std::min(next, int64_t(*point));
  return std::min(tokens, next - int64_t(job.prompt_done));
}

void Engine::Impl::CachePrefix(EngineJob& job, const Session& s) {
  if (!prefix_cache || !job.from_empty) return;
  const size_t done = job.prompt_done;
  if (done % size_t(options.prefix_cache_interval) != 0 && done != job.prompt.size() &&
      !std::binary_search(job.cache_points.begin(), job.cache_points.end(), done)) {
    return;
  }
  if (prefix_cache->Contains(job.prompt, done)) return;
  // One copy of the prompt's ids, shared by every entry cut from it.
  if (!job.cache_ids) job.cache_ids = std::make_shared<const std::vector<int32_t>>(job.prompt);
  prefix_cache->Insert(job.cache_ids, done, CaptureSlot(*pool, s.slot));
}

const std::string& Engine::Impl::TokenText(int32_t token) {
  auto [it, added] = token_texts.try_emplace(token);
  if (!added) return it->second;
  std::string text;
  if (token < tokenizer.vocab_size()) {
    TextStreamer streamer(tokenizer, TextStreamer::Mode::kContinuation);
    auto head = streamer.Add(token);
    auto tail = streamer.Flush();
    if (head.ok() && tail.ok()) text = *head + *tail;
  }
  if (!IsValidUtf8(text)) {  // part of a character: its bytes, escaped
    std::string escaped;
    for (unsigned char c : text) absl::StrAppend(&escaped, "\\x", absl::Hex(c, absl::kZeroPad2));
    text = std::move(escaped);
  }
  it->second = std::move(text);
  return it->second;
}

TokenLogprobs Engine::Impl::Logprobs(const std::vector<float>& logits, int32_t token, int top) {
  const int vocab = model.vocab_size();
  TokenLogprobs out;
  out.chosen = {token, TokenText(token), Logprob(logits.data(), vocab, token)};
  for (const TokenLogprob& t : TopLogprobs(logits.data(), vocab, top)) {
    out.top.push_back({t.token, TokenText(t.token), t.logprob});
  }
  return out;
}

void Engine::Impl::Finish(EngineJob& job, const absl::Status& status, const std::string& reason) {
  Session& s = *sessions.Find(job.session_id);
  const bool mid_prompt = job.prompt_done > 0 && job.prompt_done < job.prompt.size();
  // An all_or_nothing turn that did not complete goes back to where it began, as if never sent.
  const bool incomplete = !status.ok() || reason == "cancelled";
  const bool rolled_back = job.before_prompt && (mid_prompt || (job.request.all_or_nothing && incomplete));
  if (rolled_back) {
    RestoreSlot(*job.before_prompt, *pool, s.slot);
    job.prompt_done = 0;
    if (job.request.all_or_nothing) {
      s.stored = job.stored_before;  // the store holds what the slot holds again
      std::lock_guard<std::mutex> lock(stats_mu);
      ++stats.turns_rolled_back;
    }
  }
  // As GenerateText: text held back for a possible stop string or an incomplete character is
  // released when generation ends by length or eos.
  if (status.ok() && (reason == "length" || reason == "stop") && !job.stops.stopped()) {
    std::string tail;
    if (auto rest = job.streamer.Flush(); rest.ok()) tail = job.stops.Add(*rest);
    tail += job.stops.Flush();
    Emit(job, tail, {});
  }
  Usage usage;
  usage.prompt_tokens = int64_t(job.prompt_done);
  usage.cached_tokens = job.prompt_done > 0 ? job.cached_tokens : 0;
  usage.completion_tokens = job.generated;
  usage.drafted_tokens = job.drafted;
  usage.accepted_tokens = job.accepted;
  usage.session_position = Position(s);
  // A draft lane that followed the whole turn stays with the session for its next turn.
  if (job.draft_lane >= 0 && draft_lanes[size_t(job.draft_lane)].job == job.id && !s.ephemeral && !job.choices &&
      !rolled_back && job.prompt_done == job.prompt.size()) {
    DraftLane& lane = draft_lanes[size_t(job.draft_lane)];
    lane.session = job.session_id;
    lane.carried = job.draft_context.empty() ? job.context : std::move(job.draft_context);
  }
  // The turn changed the session (a prompt rolled back did not): its tokens join the session's draft
  // history (the prompt as far as it went in), its outcome goes with the state.
  if (!s.ephemeral && !job.choices && job.prompt_done > 0 && s.slot >= 0 && options.ngram_history > 0) {
    std::vector<int32_t>& h = s.draft_history;
    const size_t absorbed = job.prompt_done < job.prompt.size() ? job.prompt_done : job.context.size();
    h.insert(h.end(), job.context.begin(), job.context.begin() + ptrdiff_t(absorbed));
    if (int64_t(h.size()) > options.ngram_history) h.erase(h.begin(), h.end() - options.ngram_history);
  }
  if (!s.ephemeral && !job.choices && job.prompt_done > 0) {
    s.last_turn = TurnRecord{job.request.request_fingerprint,
                             job.start_position,
                             std::move(job.out_ids),
                             std::move(job.out_text),
                             status.ok() ? reason : "cancelled",
                             usage.prompt_tokens,
                             usage.completion_tokens,
                             usage.session_position,
                             usage.cached_tokens,
                             usage.drafted_tokens,
                             usage.accepted_tokens};
  }
  // Several choices end below; a turn rolled back to a state the store holds has nothing to write.
  const bool commit = status.ok() && !s.ephemeral && TurnDurable() && !job.choices && !(rolled_back && s.stored);
  // A turn to commit keeps its session busy until it is acknowledged (or undone).
  sessions.SetJob(s, commit ? kCommitting : 0);
  sessions.Touch(s, NowUnixMs());
  if (s.ephemeral) {
    if (s.slot >= 0) FreeSlot(s);
    sessions.Erase(s.id);
  }
  GenerateJob request = std::move(job.request);
  std::shared_ptr<ChoiceGroup> choices = std::move(job.choices);
  const int choice = job.choice;
  jobs.erase(job.id);  // `job` is gone from here on
  if (choices) {
    request.on_choice_done(choice, status.ok() ? reason : "");
    if (choice == 0) {
      choices->usage.prompt_tokens = usage.prompt_tokens;
      choices->usage.cached_tokens = usage.cached_tokens;
    }
    choices->usage.completion_tokens += usage.completion_tokens;
    choices->usage.drafted_tokens += usage.drafted_tokens;
    choices->usage.accepted_tokens += usage.accepted_tokens;
    if (!status.ok() && choices->status.ok()) {
      choices->status = status;
      request.cancelled->store(true);  // shared by every choice: the others end at the next step
    }
    if (--choices->running > 0) return;
    unfinished_jobs.fetch_sub(1);
    request.on_done(choices->status, choices->status.ok() ? reason : "", choices->usage);
    return;
  }
  if (commit) {
    // Acknowledged by CommitTurns, after this step, once the store holds the state.
    to_commit.push_back({s.id, std::move(request), reason, usage});
    return;
  }
  unfinished_jobs.fetch_sub(1);
  request.on_done(status, reason, usage);
}

std::optional<TurnRecord> Engine::Impl::ResentTurn(Session& s, const GenerateJob& request) {
  if (request.request_fingerprint == 0 || request.n != 1) return std::nullopt;
  std::optional<TurnRecord> turn;
  if (s.slot >= 0) {
    turn = s.last_turn;
  } else if (s.on_disk) {
    absl::StatusOr<SessionSnapshot> stored = LoadStored(s);
    if (stored.ok()) turn = std::move(stored->last_turn);
  }
  if (!turn || turn->request_fingerprint != request.request_fingerprint ||
      turn->start_position != *request.expected_position || turn->session_position != Position(s)) {
    return std::nullopt;
  }
  return turn;
}

void Engine::Impl::Replay(GenerateJob& request, const TurnRecord& turn) {
  if (request.on_start) request.on_start(turn.start_position);
  request.on_output(turn.text, turn.token_ids, {});
  Usage usage;
  usage.prompt_tokens = turn.prompt_tokens;
  usage.completion_tokens = turn.completion_tokens;
  usage.session_position = turn.session_position;
  usage.cached_tokens = turn.cached_tokens;
  usage.drafted_tokens = turn.drafted_tokens;
  usage.accepted_tokens = turn.accepted_tokens;
  usage.replayed = true;
  {
    std::lock_guard<std::mutex> lock(stats_mu);
    ++stats.turns_replayed;
  }
  unfinished_jobs.fetch_sub(1);
  request.on_done(absl::OkStatus(), turn.finish_reason, usage);
}

void Engine::Impl::SpawnChoices(EngineJob& job) {
  const Session& s = *sessions.Find(job.session_id);
  auto state = std::make_shared<const SessionSnapshot>(CaptureSlot(*pool, s.slot));
  job.choices = std::make_shared<ChoiceGroup>();
  job.choices->running = job.request.n;
  for (int i = 1; i < job.request.n; ++i) {
    GenerateJob request = job.request;  // the callbacks, the constraint and the cancel flag are shared
    request.sampling.seed += uint64_t(i) * 0x9E3779B97F4A7C15ull;
    auto c = std::make_unique<EngineJob>(next_job_id++, std::move(request), tokenizer);
    c->arrival = job.arrival;
    c->group = job.group;
    c->session_id = absl::StrCat("\x01", "ephemeral-", next_ephemeral++);
    Session& cs = sessions.Add(c->session_id, true);
    cs.created_unix_ms = NowUnixMs();
    sessions.SetJob(cs, c->id);
    c->prompt = job.prompt;
    c->prompt_done = job.prompt.size();
    c->context = job.context;
    c->logits = job.logits;
    c->choices = job.choices;
    c->choice = i;
    c->fork_from = state;
    jobs.emplace(c->id, std::move(c));
  }
}

void Engine::Impl::CommitTurns(bool final) {
  if (to_commit.empty()) return;
  const int64_t now = SteadyMs();
  std::vector<FinishedTurn> turns, later;
  for (FinishedTurn& t : to_commit) (final || t.next_try_ms <= now ? turns : later).push_back(std::move(t));
  to_commit = std::move(later);
  if (turns.empty()) return;
  std::vector<SessionSnapshot> states;
  std::vector<BlobWrite> writes;
  for (const FinishedTurn& t : turns) {
    Session& s = *sessions.Find(t.session_id);
    auto snap = Snapshot(s);  // resident: taken from its slot, cannot fail
    STEADY_CHECK(snap.ok());
    writes.push_back({s.id, EncodeSnapshot(*snap, shape.fingerprint)});
    states.push_back(*std::move(snap));
  }
  std::vector<absl::Status> statuses = store()->Put(writes);
  int64_t failed = 0;
  std::vector<bool> answered(turns.size(), true);
  for (size_t i = 0; i < turns.size(); ++i) {
    Session& s = *sessions.Find(turns[i].session_id);
    if (statuses[i].ok()) {
      MarkStored(s, states[i]);
      sessions.SetJob(s, 0);
      continue;
    }
    FinishedTurn& t = turns[i];
    if (t.since_ms < 0) t.since_ms = now;
    if (!final && StoreBusy(statuses[i]) && now < t.since_ms + options.store_wait_ms) {
      // The store is away for now: the turn stays unacknowledged, its state in the slot, and is
      // written again later.
      t.next_try_ms = std::min(now + options.store_poll_ms, t.since_ms + options.store_wait_ms);
      to_commit.push_back(std::move(t));
      answered[i] = false;
      continue;
    }
    if (StoreBusy(statuses[i]) && t.since_ms < now) statuses[i] = GaveUp(statuses[i], now - t.since_ms);
    // Not durable, so not acknowledged: the session goes back to what the store holds, its last
    // durable state (read again on its next use), and the client hears why.
    ++failed;
    sessions.SetJob(s, 0);
    FreeSlot(s);
    sessions.SetOnDisk(s, true);
    s.stored = true;
    // Offloaded now: another server may take it over (the lease of a session this server does not
    // keep resident would otherwise be renewed for ever).
    if (Shared()) store()->Release(s.id);
    if (statuses[i].code() == absl::StatusCode::kAborted) {
      // Fenced (SessionStore::Put): another server took the session over; its history stands.
      statuses[i] = absl::UnavailableError(absl::StrCat("session ", s.id, ": another server has taken it over, so ",
                                                        "this turn was not applied (",
                                                        std::string(statuses[i].message()), "); retry"));
    } else {
      statuses[i] = WithContext(statuses[i], absl::StrCat("session ", s.id,
                                                          ": the turn could not be made durable and was undone (the "
                                                          "session is back at position ", s.position, ")"));
    }
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu);
    stats.turns_committed += int64_t(std::count(answered.begin(), answered.end(), true)) - failed;
    stats.commit_failures += failed;
  }
  for (size_t i = 0; i < turns.size(); ++i) {
    if (!answered[i]) continue;
    unfinished_jobs.fetch_sub(1);
    turns[i].request.on_done(statuses[i], statuses[i].ok() ? turns[i].reason : "", turns[i].usage);
  }
}

absl::Status Engine::Impl::EmitToken(EngineJob& job, int32_t token, const std::vector<float>& raw) {
  job.context.push_back(token);
  if (!job.draft_context.empty()) job.draft_context.push_back(token);
  std::string text;
  if (token < tokenizer.vocab_size()) {
    auto piece = job.streamer.Add(token);
    if (!piece.ok()) return piece.status();
    text = job.stops.Add(*piece);
  }
  std::vector<TokenLogprobs> logprobs;
  if (job.request.top_logprobs >= 0) logprobs.push_back(Logprobs(raw, token, job.request.top_logprobs));
  Emit(job, text, {token}, logprobs);
  return absl::OkStatus();
}

int64_t Engine::Impl::SettleVerify(EngineJob& job, int slot, const std::vector<int32_t>& drafts, const float* logits) {
  // Row i holds the logits after the step's token and drafts [0, i): row 0 is job.logits already.
  // Each turn samples row i as the next decode step would; an accepted draft is in the state with
  // its logits computed, so the job goes on with row i + 1 without a step of its own.
  const size_t vocab = size_t(model.vocab_size());
  int keep = 1;  // the step's first token, then each accepted draft
  for (size_t i = 0; i <= drafts.size(); ++i) {
    if (i > 0) job.logits.assign(logits + i * vocab, logits + (i + 1) * vocab);
    if (i == drafts.size()) break;  // every draft accepted: the last row is the next step's
    std::vector<float> row = job.logits;  // sampling changes it; job.logits stays raw
    auto next = SampleNext(job.sampler, job.constraint ? &*job.constraint : nullptr, &job.mask, row.data(),
                           int(vocab), job.context);
    if (!next.ok()) {
      pool->KeepVerified(slot, keep);
      Finish(job, next.status(), "");
      return keep - 1;
    }
    const int token = *next;
    if (token != drafts[i] || token < 0 || model.config().IsEos(token)) {
      // The next token, sampled from its row as the next step would sample it: that step takes it
      // (an end token, or -1, ends the job there, never entering the state).
      job.drawn = token;
      break;
    }
    if (absl::Status st = EmitToken(job, token, job.logits); !st.ok()) {
      pool->KeepVerified(slot, keep);  // as plain decoding: the token failed before entering the state
      Finish(job, st, "");
      return keep - 1;
    }
    ++keep;
    ++job.accepted;
    ++job.generated;
    if (job.stops.stopped() || job.generated >= job.request.max_tokens) {
      pool->KeepVerified(slot, keep);
      Finish(job, absl::OkStatus(), job.stops.stopped() ? "stop" : "length");
      return keep - 1;
    }
  }
  pool->KeepVerified(slot, keep);
  return keep - 1;
}

bool Engine::Impl::Step() {
  const auto start = std::chrono::steady_clock::now();
  // Cancelled jobs end at this step boundary.
  std::vector<EngineJob*> cancelled;
  for (auto& [id, job] : jobs) {
    if (job->request.cancelled->load()) cancelled.push_back(job.get());
  }
  for (EngineJob* job : cancelled) Finish(*job, absl::OkStatus(), "cancelled");

  SchedulerInput in;
  in.max_batch = options.max_batch;
  in.prefill_budget = options.prefill_budget;
  in.slots_available = sessions.free_slots() + (store() ? sessions.evictable() : 0);
  for (const auto& [id, job] : jobs) {
    in.jobs.push_back({id, job->phase, int64_t(job->prompt.size() - job->prompt_done), job->arrival, job->last_advanced,
                       job->group, 1 + int64_t(DraftTokens(*job))});
  }
  const StepPlan plan = Schedule(in);
  if (plan.empty()) return !cancelled.empty();

  for (int64_t id : plan.admit) {
    EngineJob& job = *jobs.at(id);
    Session& s = *sessions.Find(job.session_id);
    if (absl::Status st = MakeResident(s); !st.ok()) {
      Finish(job, st, "");
      continue;
    }
    if (job.fork_from) {  // a choice of an n > 1 request: the prompt's state is its start
      RestoreSlot(*job.fork_from, *pool, s.slot);
      job.fork_from.reset();
      job.phase = JobPhase::kDecode;
      continue;
    }
    job.phase = JobPhase::kPrefill;
    StartFromPrefixCache(job, s);
  }

  // Rows of this step: decode tokens first, then prefill chunks; one logits row per segment (a
  // verify segment: one per token).
  struct Row {
    EngineJob* job;
    int64_t prompt_tokens;        // 0: a decode row
    std::vector<int32_t> drafts;  // a decode row's drafted tokens after its own (verified this step)
  };
  std::vector<Segment> segments;
  std::vector<Row> rows;
  int64_t tokens_in = 0, tokens_out = 0;
  std::vector<std::pair<int64_t, int64_t>> verifies;  // (drafted, accepted) per verify segment
  std::vector<int> draft_k;  // per decode row: the drafts it may verify this step
  for (size_t d = 0; d < plan.decode.size(); ++d) {
    EngineJob& job = *jobs.at(plan.decode[d]);
    job.last_advanced = step;
    std::vector<float> raw;  // the logits before Sample changes them, for the log-probabilities
    if (job.request.top_logprobs >= 0) raw = job.logits;
    int token = 0;
    if (job.drawn) {
      token = *job.drawn;
      job.drawn.reset();
    } else {
      auto next = SampleNext(job.sampler, job.constraint ? &*job.constraint : nullptr, &job.mask, job.logits.data(),
                             model.vocab_size(), job.context);
      if (!next.ok()) {
        Finish(job, next.status(), "");
        continue;
      }
      token = *next;  // -1: the constrained text is complete
    }
    if (token < 0 || model.config().IsEos(token)) {
      Finish(job, absl::OkStatus(), "stop");
      continue;
    }
    if (absl::Status st = EmitToken(job, token, raw); !st.ok()) {
      Finish(job, st, "");
      continue;
    }
    // The sampled token enters the state even when it ends generation (as in GenerateText), so
    // the session continues right after the last token the client saw. Speculating, the drafts
    // that may follow it are verified in the same step (in the rows the scheduler granted).
    segments.push_back({sessions.Find(job.session_id)->slot, {token}, false});
    rows.push_back({&job, 0, {}});
    const int64_t remaining = job.request.max_tokens - job.generated - 1;
    const int64_t granted = plan.decode_rows.empty() ? 0 : plan.decode_rows[d] - 1;
    draft_k.push_back(granted > 0 && remaining > 0 && !job.stops.stopped()
                          ? int(std::min({granted, remaining, int64_t(DraftTokens(job))}))
                          : 0);
  }
  if (std::any_of(draft_k.begin(), draft_k.end(), [](int k) { return k > 0; })) {
    std::vector<EngineJob*> decoding;
    for (const Row& row : rows) decoding.push_back(row.job);
    std::vector<std::vector<int32_t>> drafts = ProposeDrafts(decoding, draft_k);
    for (size_t r = 0; r < drafts.size(); ++r) {
      if (drafts[r].empty()) continue;
      segments[r].tokens.insert(segments[r].tokens.end(), drafts[r].begin(), drafts[r].end());
      segments[r].verify = true;
      rows[r].job->drafted += int64_t(drafts[r].size());
      rows[r].drafts = std::move(drafts[r]);
    }
  }
  for (const PrefillChunk& chunk : plan.prefill) {
    auto it = jobs.find(chunk.id);
    if (it == jobs.end() || it->second->phase != JobPhase::kPrefill) continue;  // admission failed
    EngineJob& job = *it->second;
    const int slot = sessions.Find(job.session_id)->slot;
    const int64_t take = PrefillTake(job, chunk.tokens);
    if (job.prompt_done == 0 && (size_t(take) < job.prompt.size() || job.request.all_or_nothing)) {
      job.before_prompt = CaptureSlot(*pool, slot);
    }
    segments.push_back({slot,
                        std::vector<int32_t>(job.prompt.begin() + job.prompt_done,
                                             job.prompt.begin() + job.prompt_done + take),
                        false});
    rows.push_back({&job, take});
  }
  // These sessions' states change now: the store holds them again after a commit (or an offload).
  for (const Row& row : rows) sessions.Find(row.job->session_id)->stored = false;
  if (!segments.empty()) {
    // On a GPU the next tokens are drawn there (only ids come back) unless a row needs the logits:
    // for the penalties and logit bias, which the host Sampler applies, for log-probabilities, or
    // for a constraint's mask.
    bool on_device = options.device_sampling && pool->DrawsOnDevice();
    for (const Row& row : rows) {
      const GenerateJob& r = row.job->request;
      // (n > 1: the other choices start from this row's logits.)
      on_device = on_device && !r.sampling.ChangesLogits() && r.top_logprobs < 0 && !r.constraint && r.n == 1 &&
                  row.drafts.empty();
    }
    std::vector<float> logits;
    std::vector<int32_t> drawn;
    if (on_device) {
      std::vector<DrawParams> draws;
      for (size_t r = 0; r < rows.size(); ++r) {
        const SamplingParams& p = rows[r].job->request.sampling;
        // The counter is the session's position after this step: one distinct draw per token.
        draws.push_back({p.temperature, p.top_k, p.top_p, p.seed,
                         uint64_t(pool->position(segments[r].slot) + int64_t(segments[r].tokens.size()))});
      }
      pool->ForwardSample(segments, draws, &drawn);
    } else {
      pool->Forward(segments, &logits);
    }
    const size_t vocab = size_t(model.vocab_size());
    size_t out = 0;  // the row's first logits row
    for (size_t r = 0; r < rows.size(); ++r) {
      EngineJob& job = *rows[r].job;
      const size_t first = out;
      out += segments[r].verify ? segments[r].tokens.size() : 1;
      if (on_device) {
        job.drawn = drawn[r];
      } else {
        job.logits.assign(logits.begin() + first * vocab, logits.begin() + (first + 1) * vocab);
      }
      if (rows[r].prompt_tokens == 0) {
        ++job.generated;
        ++tokens_out;
        // (A job that drafted had room for more tokens and no stop string yet.)
        if (job.stops.stopped()) {
          Finish(job, absl::OkStatus(), "stop");
        } else if (job.generated >= job.request.max_tokens) {
          Finish(job, absl::OkStatus(), "length");
        } else if (!rows[r].drafts.empty()) {
          const int64_t accepted = SettleVerify(job, segments[r].slot, rows[r].drafts, logits.data() + first * vocab);
          tokens_out += accepted;
          verifies.emplace_back(int64_t(rows[r].drafts.size()), accepted);
        }
        continue;
      }
      job.prompt_done += rows[r].prompt_tokens;
      tokens_in += rows[r].prompt_tokens;
      CachePrefix(job, *sessions.Find(job.session_id));
      if (job.prompt_done < job.prompt.size()) continue;
      if (!job.request.all_or_nothing) job.before_prompt.reset();
      job.phase = JobPhase::kDecode;
      if (job.request.max_tokens == 0) {
        Finish(job, absl::OkStatus(), "length");
      } else if (job.request.n > 1 && !job.choices) {
        SpawnChoices(job);
      }
    }
  }
  ++step;
  UpdateStats(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), tokens_in, tokens_out,
              verifies);
  return true;
}

void Engine::Impl::Shutdown() {
  // Work posted after the last drain: run it (jobs are refused), then refuse new posts.
  for (;;) {
    std::vector<std::function<void()>> work;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (inbox.empty()) {
        closed = true;
        break;
      }
      work.swap(inbox);
    }
    for (auto& fn : work) fn();
  }
  // Calls waiting for the store: nothing of theirs happened.
  std::vector<WaitingCall> parked;
  parked.swap(waiting);
  for (WaitingCall& c : parked) c.done(absl::UnavailableError("the engine is shutting down"));
  // Between steps: running jobs keep what they generated (a prompt cut midway is rolled back).
  while (!jobs.empty()) {
    EngineJob& job = *jobs.begin()->second;
    Finish(job, absl::UnavailableError(job.phase == JobPhase::kWaiting
                                           ? "the engine is shutting down"
                                           : "the engine is shutting down; the tokens generated so far are in the session"),
           "");
  }
  CommitTurns(/*final=*/true);
  if (!store()) return;
  std::vector<Session*> named;
  for (const Session* s : sessions.Named()) named.push_back(sessions.Find(s->id));
  for (Session* s : named) {
    if (s->stored) continue;
    const absl::Status st = s->slot >= 0 ? Offload(*s) : Persist(*s, empty_state);
    if (!st.ok()) std::fprintf(stderr, "steady: session %s not persisted: %s\n", s->id.c_str(), std::string(st.message()).c_str());
  }
  // Peers may take every session over at once.
  if (Shared()) {
    for (const Session* s : sessions.Named()) store()->Release(s->id);
  }
}

void Engine::Impl::UpdateStats(double step_seconds, int64_t tokens_in, int64_t tokens_out,
                               const std::vector<std::pair<int64_t, int64_t>>& verifies) {
  int64_t state_bytes = int64_t(sessions.resident_sessions()) * int64_t(pool->StateBytesPerSlot());
  const bool grows = std::any_of(shape.growth_per_token.begin(), shape.growth_per_token.end(), [](uint64_t g) { return g > 0; });
  if (grows) {
    for (int slot = 0; slot < pool->slots(); ++slot) state_bytes += int64_t(pool->BytesInUse(slot) - pool->StateBytesPerSlot());
  }
  std::lock_guard<std::mutex> lock(stats_mu);
  stats.sessions_resident = sessions.resident_sessions();
  stats.sessions_offloaded = sessions.offloaded_sessions();
  stats.state_bytes = state_bytes;
  stats.steps = step;
  stats.tokens_in += tokens_in;
  stats.tokens_out += tokens_out;
  for (const auto& [drafted, accepted] : verifies) {
    stats.drafted_tokens += drafted;
    stats.accepted_tokens += accepted;
    stats.verify_accepted.resize(kMaxDraftTokens + 1);
    ++stats.verify_accepted[size_t(std::clamp<int64_t>(accepted, 0, kMaxDraftTokens))];
  }
  if (prefix_cache) {
    const PrefixCache::Stats& p = prefix_cache->stats();
    stats.prefix_hits = p.hits;
    stats.prefix_misses = p.misses;
    stats.prefix_tokens_saved = p.tokens_saved;
    stats.prefix_entries = p.entries;
    stats.prefix_bytes = p.bytes;
  }
  if (step_seconds > 0) stats.last_step_seconds = step_seconds;
}

}  // namespace steady
