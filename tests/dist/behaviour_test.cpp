// tests/dist/behaviour_test.cpp - StarPU-MPI's own tests' ideas on ordo::dist:
// where an op runs (owner computes, explicit placement), the cache (bytes
// with it on and off), data that arrives before its receive, detached
// sends, a token round a ring, a user codec, errors crossing ranks.
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist_test_util.hpp"

namespace ordo::dist::test {
namespace {

TEST(DistPlacement, OwnerComputesAndExplicitRank) {
  Engine engine(engine_options());
  Dist d(engine);
  const int n = d.size();
  std::vector<std::uint64_t> slot(static_cast<std::size_t>(2 * n), 0);
  std::vector<DistVar> v;
  for (int i = 0; i < 2 * n; ++i) v.push_back(d.register_value(slot[std::size_t(i)], i % n));
  // ran[k] = 1 + the rank op k ran on, on that rank only: summed, each op once, where expected.
  std::vector<std::uint64_t> ran(static_cast<std::size_t>(4 * n), 0);
  std::vector<std::uint64_t> expected(ran.size(), 0);
  const int me = d.rank();
  for (int i = 0; i < 2 * n; ++i) {
    const std::size_t k = std::size_t(i);
    d.push([&, k] { ran[k] = std::uint64_t(me) + 1; }, {}, {v[k]});  // owner computes
    expected[k] = std::uint64_t(i % n) + 1;
    EXPECT_EQ(d.executor({}, {v[k]}), i % n);
  }
  for (int i = 0; i < 2 * n; ++i) {
    const std::size_t k = std::size_t(2 * n + i);
    const int at = (i + 1) % n;  // explicit placement, not the owner
    d.push([&, k] { ran[k] = std::uint64_t(me) + 1; }, {v[std::size_t(i)]}, {v[std::size_t(i)]}, {}, at);
    expected[k] = std::uint64_t(at) + 1;
  }
  d.wait_for_all();
  d.allreduce_sum(ran);
  EXPECT_EQ(ran, expected);
  EXPECT_EQ(sum_over_ranks(d, d.stats().ops_run), std::uint64_t(4 * n));
}

TEST(DistTransfer, RemoteWriteGoesBackToOwner) {
  Engine engine(engine_options());
  Dist d(engine);
  std::uint64_t a = d.rank() == 0 ? 5 : 0;  // the owner's value; elsewhere a copy
  const DistVar va = d.register_value(a, 0);
  for (int r = 0; r < d.size(); ++r) d.push([&] { a = a * 10 + 1; }, {}, {va}, {}, r);
  d.wait_for_var(va);
  if (d.rank() == 0) {
    std::uint64_t want = 5;
    for (int r = 0; r < d.size(); ++r) want = want * 10 + 1;
    EXPECT_EQ(a, want);
  }
  d.wait_for_all();
}

TEST(DistCache, ValueReadTwiceAtOneVersionMovesOnce) {
  for (const bool cache : {true, false}) {
    Engine engine(engine_options());
    Dist d(engine, {.cache = cache});
    std::uint64_t a = 42, b = 0, c = 0;
    const DistVar va = d.register_value(a, 0);
    const DistVar vb = d.register_value(b, d.size() - 1);
    const DistVar vc = d.register_value(c, d.size() - 1);
    d.push([&] { b += a; }, {va}, {vb});
    d.push([&] { c += a; }, {va}, {vc});  // same version of a at the same rank
    d.wait_for_all();
    const std::uint64_t sent = sum_over_ranks(d, d.stats().messages_sent);
    const std::uint64_t bytes = sum_over_ranks(d, d.stats().bytes_sent);
    const std::uint64_t hits = d.stats().cache_hits;
    if (d.rank() == d.size() - 1) {
      EXPECT_EQ(b, 42u);
      EXPECT_EQ(c, 42u);
    }
    if (cache) {
      EXPECT_EQ(sent, 1u);
      EXPECT_EQ(hits, 1u);  // every rank's books count it
      EXPECT_EQ(bytes, 48u + 8u);  // one envelope (io/dist/progress.hpp) and the value
    } else {
      EXPECT_EQ(sent, 2u);
      EXPECT_EQ(hits, 0u);
      EXPECT_EQ(bytes, 2 * (48u + 8u));
    }
    // A write invalidates: the next read moves it again.
    d.push([&] { a += 1; }, {}, {va});
    d.push([&] { b += a; }, {va}, {vb});
    d.wait_for_all();
    EXPECT_EQ(sum_over_ranks(d, d.stats().messages_sent), cache ? 2u : 3u);
    if (d.rank() == d.size() - 1) {
      EXPECT_EQ(b, 42u + 43u);
    }
  }
}

// The value reaches the reader while its receive op cannot start yet (the
// reader's copy is held by a local op): it waits, received, until the
// receive starts. The sender's op is detached: done once the message is
// handed over, before anyone received it.
TEST(DistTransfer, ArrivesBeforeReceiveAndSendIsDetached) {
  Engine engine(engine_options());
  Dist d(engine);
  const int reader = d.size() - 1;
  std::uint64_t a = d.rank() == 0 ? 7 : 0;
  std::uint64_t b = 0;
  const DistVar va = d.register_value(a, 0);
  const DistVar vb = d.register_value(b, reader);
  std::atomic<bool> release{false};
  if (d.rank() == reader) {
    // Hold the reader's copy of a (a local op, not a distributed one).
    engine.push_sync([&] { spin_until([&] { return release.load(); }); }, Context::cpu(), {}, {va.local()});
  }
  d.push([&] { b = a; }, {va}, {vb});
  if (d.rank() == 0) {
    engine.wait_for_var(va.local());  // the send op has finished: a is free on the owner again
  }
  if (d.rank() == reader) {
    EXPECT_TRUE(spin_until([&] { return d.stats().early_messages >= 1; }));
    release = true;
  }
  d.push([&] { a = 8; }, {}, {va});  // after the send, not seen by the reader's op
  d.wait_for_all();
  if (d.rank() == reader) {
    EXPECT_EQ(b, 7u);
  }
  if (d.rank() == 0) {
    EXPECT_EQ(a, 8u);
  }
}

TEST(DistRing, TokenGoesRoundTheRing) {
  Engine engine(engine_options());
  Dist d(engine);
  const int n = d.size();
  const int rounds = 5;
  std::vector<std::uint64_t> token(static_cast<std::size_t>(n), 0);
  std::vector<DistVar> t;
  for (int i = 0; i < n; ++i) t.push_back(d.register_value(token[std::size_t(i)], i));
  // Rank i reads token i-1 and writes its own: each step needs the previous one's value.
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < n; ++i) {
      const std::size_t me = std::size_t(i), prev = std::size_t((i + n - 1) % n);
      d.push([&, me, prev] { token[me] = token[prev] + 1; }, {t[prev]}, {t[me]});
    }
  }
  d.wait_for_all();
  const auto mine = std::size_t(d.rank());
  EXPECT_EQ(token[mine], std::uint64_t(rounds - 1) * n + mine + 1);
}

TEST(DistCodec, UserSerializePair) {
  Engine engine(engine_options());
  Dist d(engine);
  std::vector<int> list;  // owned by rank 0, grown on every rank in turn
  if (d.rank() == 0) list = {1};
  Codec codec{[&] {
                std::vector<std::byte> b(list.size() * sizeof(int));
                if (!list.empty()) std::memcpy(b.data(), list.data(), b.size());
                return b;
              },
              [&](std::span<const std::byte> b) {
                list.resize(b.size() / sizeof(int));
                if (!b.empty()) std::memcpy(list.data(), b.data(), b.size());
              }};
  const DistVar v = d.register_codec(codec, 0);
  for (int r = 0; r < d.size(); ++r) d.push([&, r] { list.push_back(r + 10); }, {}, {v}, {}, r);
  d.wait_for_all();
  if (d.rank() == 0) {
    std::vector<int> want = {1};
    for (int r = 0; r < d.size(); ++r) want.push_back(r + 10);
    EXPECT_EQ(list, want);
  }
}

TEST(DistErrors, ExceptionOnOneRankReachesWaitForVarOnTheOwner) {
  Engine engine(engine_options());
  Dist d(engine);
  const int thrower = d.size() - 1;
  std::uint64_t a = 0, b = 0;
  const DistVar va = d.register_value(a, 0);        // written remotely, by `thrower`
  const DistVar vb = d.register_value(b, thrower);  // fails where it lives, read by rank 0
  d.push([] { throw std::runtime_error("boom"); }, {}, {va}, {}, thrower);
  d.push([] { throw std::runtime_error("bang"); }, {}, {vb});
  std::uint64_t c = 0;
  const DistVar vc = d.register_value(c, 0);
  d.push([&] { c = b + 1; }, {vb}, {vc});  // skipped on rank 0: b arrives as an error
  // The owner of a and c rethrows the failures of ops that ran on `thrower`.
  if (d.rank() == 0) {
    try {
      d.wait_for_var(va);
      ADD_FAILURE() << "no exception";
    } catch (const RemoteError& e) {
      EXPECT_EQ(e.rank(), thrower);
      EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos) << e.what();
    }
    try {
      d.wait_for_var(vc);
      ADD_FAILURE() << "no exception";
    } catch (const RemoteError& e) {
      EXPECT_EQ(e.rank(), thrower);
      EXPECT_NE(std::string(e.what()).find("bang"), std::string::npos) << e.what();
    }
    EXPECT_EQ(c, 0u);
  }
  // Where they were thrown, the original exceptions (thrower's copy of a, its own b).
  if (d.rank() == thrower) {
    EXPECT_THROW(d.wait_for_var(vb), std::runtime_error);
    if (thrower != 0) {
      EXPECT_THROW(d.wait_for_var(va), std::runtime_error);
    }
  }
  // Every copy that carries an error was observed: nothing left for wait_for_all.
  if (d.rank() == 0 && thrower != 0) {
    EXPECT_THROW(d.wait_for_var(vb), RemoteError);  // rank 0's copy of b
  }
  EXPECT_NO_THROW(d.wait_for_all());
}

TEST(DistErrors, WaitForAllRethrowsAfterTheBarrier) {
  Engine engine(engine_options());
  Dist d(engine);
  std::uint64_t a = 0;
  const DistVar va = d.register_value(a, 0);
  d.push([] { throw std::runtime_error("late"); }, {}, {va});
  if (d.rank() == 0) {
    EXPECT_THROW(d.wait_for_all(), std::runtime_error);
  } else {
    EXPECT_NO_THROW(d.wait_for_all());
  }
}

}  // namespace
}  // namespace ordo::dist::test
