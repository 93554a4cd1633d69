// The prefix cache: the longest cached prefix that leaves a token to feed, ids compared on a hit,
// least recently used entries out first within the byte bound; and through the engine, a request
// that starts from a cached state generates what it generates without the cache.
#include "server/engine/prefix_cache.h"

#include <gtest/gtest.h>

#include "server/engine/engine.h"
#include "tests/server/engine/engine_harness.h"
#include "tests/testutil.h"

namespace steady {
namespace {

using testing::Create;
using testing::Get;
using testing::Options;
using testing::Outcome;
using testing::Prompt;
using testing::StartEngine;
using testing::SubmitAsync;
using testing::Taylor;

SessionSnapshot StateOf(int64_t position, size_t floats) {
  SessionSnapshot s;
  s.position = position;
  s.fixed.assign(floats, float(position));
  return s;
}

std::vector<int32_t> Tokens(std::initializer_list<int32_t> t) { return t; }

TEST(PrefixCacheTest, LongestPrefixLeavesATokenAndComparesIds) {
  PrefixCache cache(1 << 20);
  const std::vector<int32_t> a = {1, 5, 6, 7, 8, 9};
  cache.Insert(a, 2, StateOf(2, 4));
  cache.Insert(a, 4, StateOf(4, 4));
  cache.Insert(a, 6, StateOf(6, 4));
  auto hit = cache.Longest(Tokens({1, 5, 6, 7, 8, 9, 10}));
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->length, 6u);
  EXPECT_EQ(hit->state.position, 6);
  // The same six tokens: the whole prompt cannot come from the cache (its last logits are needed).
  hit = cache.Longest(a);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->length, 4u);
  EXPECT_EQ(cache.Longest(Tokens({1, 5, 99, 7})).get(), cache.Longest(Tokens({1, 5, 99, 7})).get());
  EXPECT_EQ(cache.Longest(Tokens({1, 5, 99, 7}))->length, 2u);
  EXPECT_FALSE(cache.Longest(Tokens({2, 5, 6, 7})));  // no shared prefix
  EXPECT_TRUE(cache.Contains(a, 4));
  EXPECT_FALSE(cache.Contains(Tokens({1, 5, 6, 8}), 4)) << "the same length, other ids";
  const PrefixCache::Stats& s = cache.stats();
  EXPECT_EQ(s.entries, 3);
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.hits, 5);
  EXPECT_EQ(s.tokens_saved, 6 + 4 + 2 + 2 + 2);
}

TEST(PrefixCacheTest, EvictsLeastRecentlyUsedWithinTheBound) {
  const size_t floats = 100;  // 400 bytes of state per entry, plus the ids
  PrefixCache cache(3 * 420);
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8};
  for (size_t k = 1; k <= 3; ++k) cache.Insert(t, k, StateOf(int64_t(k), floats));
  EXPECT_EQ(cache.stats().entries, 3);
  ASSERT_TRUE(cache.Longest(Tokens({1, 2})));  // uses the 1-token entry: now the most recent
  cache.Insert(t, 4, StateOf(4, floats));     // evicts the 2-token entry, the least recent
  EXPECT_EQ(cache.stats().entries, 3);
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_LE(cache.stats().bytes, cache.capacity());
  EXPECT_TRUE(cache.Contains(t, 1));
  EXPECT_FALSE(cache.Contains(t, 2));
  EXPECT_TRUE(cache.Contains(t, 4));
  cache.Insert(t, 5, StateOf(5, 10000));  // larger than the whole cache: not kept
  EXPECT_FALSE(cache.Contains(t, 5));
}

TEST(PrefixCacheTest, EntriesCutFromOnePromptShareItsIds) {
  PrefixCache cache(1 << 20);
  auto ids = std::make_shared<const std::vector<int32_t>>(std::vector<int32_t>(1000, 7));
  for (size_t k : {250, 500, 750}) cache.Insert(ids, k, StateOf(int64_t(k), 100));
  const int64_t id_bytes = 1000 * sizeof(int32_t), state = 400;
  EXPECT_EQ(cache.stats().bytes, 3 * state + id_bytes) << "the ids once, not once per entry";
  // Evicting every entry but one keeps the ids; the last one out takes them.
  PrefixCache small(2 * state + id_bytes + 3 * int64_t(sizeof(int32_t)));
  for (size_t k : {250, 500}) small.Insert(ids, k, StateOf(int64_t(k), 100));
  small.Insert(Tokens({1, 2, 3}), 3, StateOf(3, 100));  // other ids: the 250-token entry goes
  EXPECT_EQ(small.stats().evictions, 1);
  EXPECT_EQ(small.stats().bytes, 2 * state + id_bytes + 3 * int64_t(sizeof(int32_t)));
  EXPECT_FALSE(small.Contains(*ids, 250));
  EXPECT_TRUE(small.Contains(*ids, 500));
  small.Insert(Tokens({4, 5, 6}), 3, StateOf(3, 100));  // the 500-token entry goes, and its ids with it
  EXPECT_EQ(small.stats().bytes, 2 * state + 6 * int64_t(sizeof(int32_t)));
  EXPECT_EQ(small.stats().entries, 2);
}

EngineOptions WithCache(int interval) {
  EngineOptions o = Options();
  o.prefix_cache_bytes = 64 << 20;
  o.prefix_cache_interval = interval;
  return o;
}

Outcome Send(Engine& e, const std::string& session, const std::string& prompt, int max_tokens) {
  return SubmitAsync(e, testing::Job(session, prompt, max_tokens)).get();
}

// A shared prefix: the second request starts from the first one's state at an interval boundary and
// generates exactly what an engine without the cache generates, for ephemeral and new named sessions.
TEST(PrefixCacheEngineTest, ASharedPrefixStartsFromTheCachedStateWithTheSameOutput) {
  const Model m = Taylor();
  auto cached = StartEngine(m, WithCache(16));
  auto plain = StartEngine(m, Options());
  const std::string system = Prompt(40) + " " + Prompt(41);  // dozens of tokens
  const Outcome first = Send(*cached, "", system + " " + Prompt(3), 8);
  ASSERT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.usage.cached_tokens, 0);
  for (const std::string& question : {Prompt(5), Prompt(6)}) {
    const Outcome a = Send(*cached, "", system + " " + question, 10);
    const Outcome b = Send(*plain, "", system + " " + question, 10);
    ASSERT_TRUE(a.status.ok() && b.status.ok());
    EXPECT_GE(a.usage.cached_tokens, 16);
    EXPECT_EQ(a.usage.cached_tokens % 16, 0);
    EXPECT_EQ(a.usage.prompt_tokens, b.usage.prompt_tokens);
    EXPECT_EQ(a.ids, b.ids) << question;
  }
  ASSERT_TRUE(Create(*cached, "fresh").ok());
  ASSERT_TRUE(Create(*plain, "fresh").ok());
  const Outcome a = Send(*cached, "fresh", system + " " + Prompt(7), 10);
  const Outcome b = Send(*plain, "fresh", system + " " + Prompt(7), 10);
  EXPECT_GT(a.usage.cached_tokens, 0);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(Get(*cached, "fresh")->position, Get(*plain, "fresh")->position);
  // A session that already holds tokens never starts from the cache.
  const Outcome later = Send(*cached, "fresh", system + " " + Prompt(7), 4);
  EXPECT_EQ(later.usage.cached_tokens, 0);
  EXPECT_GT(cached->stats().prefix_hits, 0);
  EXPECT_GT(cached->stats().prefix_tokens_saved, 0);
}

// A chat's system messages end where requests sharing them part ways: the cache keeps that state too
// (GenerateJob.cache_at_bytes), not only at interval boundaries, with the same output as no cache.
TEST(PrefixCacheEngineTest, TheEndOfASharedSystemPromptIsCached) {
  const Model m = Taylor();
  auto cached = StartEngine(m, WithCache(4096));  // no interval boundary inside these prompts
  auto plain = StartEngine(m, Options());
  const std::string system = Prompt(40) + " " + Prompt(41) + "\n\n";
  auto system_tokens = testing::TestTokenizer().Encode(system);
  ASSERT_TRUE(system_tokens.ok());
  for (int i = 0; i < 3; ++i) {
    GenerateJob j = testing::Job("", system + "User: " + Prompt(i) + "\nAssistant:", 8);
    j.cache_at_bytes = {system.size()};
    const Outcome a = SubmitAsync(*cached, j).get();
    const Outcome b = SubmitAsync(*plain, j).get();
    ASSERT_TRUE(a.status.ok() && b.status.ok());
    if (i > 0) {
      // BOS + the system prompt's tokens, less any the tokenizer merges across the boundary.
      EXPECT_GE(a.usage.cached_tokens, int64_t(system_tokens->size()) - 1) << i;
      EXPECT_LE(a.usage.cached_tokens, int64_t(system_tokens->size()) + 1) << i;
    }
    EXPECT_EQ(a.ids, b.ids) << i;
  }
}

// A stateless chat sends the whole history each turn: each call starts from the state at the end
// of the previous call's prompt (not an interval boundary: the chunking differs from a cold run, so
// the states may differ by rounding; greedy output is the same here).
TEST(PrefixCacheEngineTest, AStatelessChatStartsEachTurnFromThePreviousPrompt) {
  const Model m = Taylor();
  auto cached = StartEngine(m, WithCache(64));
  auto plain = StartEngine(m, Options());
  std::string history = Prompt(30);
  for (int turn = 0; turn < 5; ++turn) {
    history += " " + Prompt(turn * 7 + 2);
    const Outcome a = Send(*cached, "", history, 6);
    const Outcome b = Send(*plain, "", history, 6);
    ASSERT_TRUE(a.status.ok() && b.status.ok());
    if (turn > 0) {
      EXPECT_GT(a.usage.cached_tokens, 0) << "turn " << turn;
    }
    EXPECT_EQ(a.ids, b.ids) << "turn " << turn;
    history += a.text;
  }
}

}  // namespace
}  // namespace steady
