// ordo::Channel: FIFO delivery, backpressure, close, try_* from plain ops,
// cancellation; randomized MPMC runs checked against the values sent.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ordo/channel.hpp"
#include "ordo/for_each.hpp"
#include "toolkit/toolkit_test_util.hpp"

namespace ordo::test {
namespace {

TEST(Channel, FifoBackpressureAndCloseEndTheConsumerLoop) {
  Channel<std::unique_ptr<int>> ch(2);  // move-only values
  std::vector<int> got;
  std::atomic<int> sent{0};
  AsyncScope scope;
  auto task0 = [&]() -> Task<void> {
    for (int i = 0; i < 5; ++i) {
      co_await ch.send(std::make_unique<int>(i));
      sent.fetch_add(1);
    }
    ch.close();
  };
  scope.spawn(task0());
  EXPECT_EQ(sent.load(), 2) << "the third send waits: the channel holds 2";
  EXPECT_EQ(ch.size(), 2U);
  auto task1 = [&]() -> Task<void> {
    while (std::optional<std::unique_ptr<int>> v = co_await ch.receive()) got.push_back(**v);
  };
  scope.spawn(task1());
  scope.sync_join();
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(ch.closed());
  EXPECT_THROW(sync_wait([&]() -> Task<void> { co_await ch.send(std::make_unique<int>(9)); }()), Error);
  EXPECT_THROW(Channel<int>(0), Error);
}

TEST(Channel, TrySendTryReceiveNeverWait) {
  Channel<std::string> ch(1);
  std::string a = "a", b = "b";
  EXPECT_TRUE(ch.try_send(std::move(a)));
  EXPECT_FALSE(ch.try_send(std::move(b)));
  EXPECT_EQ(b, "b") << "a failed try_send leaves its value alone";
  EXPECT_EQ(ch.try_receive(), std::optional<std::string>("a"));
  EXPECT_EQ(ch.try_receive(), std::nullopt);
  // A waiting receiver gets a try_send's value directly (resumed on this thread).
  std::optional<std::string> got;
  AsyncScope scope;
  auto task2 = [&]() -> Task<void> { got = co_await ch.receive(); };
  scope.spawn(task2());
  EXPECT_TRUE(ch.try_send(std::string("direct")));
  scope.sync_join();
  EXPECT_EQ(got, std::optional<std::string>("direct"));
  ch.close();
  EXPECT_FALSE(ch.try_send(std::string("late")));
}

TEST(Channel, CloseWakesWaitersAndKeepsBufferedValues) {
  Channel<int> ch(1);
  ASSERT_TRUE(ch.try_send(1));
  std::atomic<int> closed_senders{0};
  std::vector<std::optional<int>> received;
  AsyncScope scope;
  auto task3 = [&]() -> Task<void> {
    try {
      co_await ch.send(2);  // full: waits, then the close wakes it
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::closed);
      closed_senders.fetch_add(1);
    }
  };
  scope.spawn(task3());
  ch.close();
  EXPECT_EQ(closed_senders.load(), 1);
  auto task4 = [&]() -> Task<void> {
    received.push_back(co_await ch.receive());  // the buffered 1
    received.push_back(co_await ch.receive());  // closed and empty
  };
  scope.spawn(task4());
  scope.sync_join();
  EXPECT_EQ(received, (std::vector<std::optional<int>>{1, std::nullopt}));
}

// Regression (as Semaphore.AStopAfterTheGrantLeavesTheWaiterGranted): a
// stop requested while close() settles its waiters must leave the ones it
// already took alone: each receiver sees the channel closed, none is cancelled.
TEST(Channel, AStopDuringCloseLeavesTheOtherReceiversClosed) {
  Channel<int> ch(1);
  std::stop_source second_stop;
  int closed = 0;
  int cancelled = 0;
  AsyncScope scope;
  auto first = [&]() -> Task<void> {
    const std::optional<int> v = co_await ch.receive();
    if (!v) ++closed;
    second_stop.request_stop();
  };
  auto second = [&](std::stop_token st) -> Task<void> {
    try {
      const std::optional<int> v = co_await ch.receive(st);
      if (!v) ++closed;
    } catch (const CancelledError&) {
      ++cancelled;
    }
  };
  scope.spawn(first());
  scope.spawn(second(second_stop.get_token()));
  ch.close();
  scope.sync_join();
  EXPECT_EQ(closed, 2);
  EXPECT_EQ(cancelled, 0);
}

TEST(Channel, CancelledSendAndReceive) {
  Channel<int> ch(1);
  ASSERT_TRUE(ch.try_send(1));
  std::stop_source s1, s2;
  std::atomic<int> cancelled{0};
  AsyncScope scope;
  auto task5 = [&]() -> Task<void> {
    try {
      co_await ch.send(2, s1.get_token());
    } catch (const CancelledError&) {
      cancelled.fetch_add(1);
    }
  };
  scope.spawn(task5());
  s1.request_stop();
  EXPECT_EQ(cancelled.load(), 1);
  EXPECT_EQ(ch.try_receive(), std::optional<int>(1));
  EXPECT_EQ(ch.try_receive(), std::nullopt) << "the cancelled send's value was not sent";
  auto task6 = [&]() -> Task<void> {
    try {
      (void)co_await ch.receive(s2.get_token());
    } catch (const CancelledError&) {
      cancelled.fetch_add(1);
    }
  };
  scope.spawn(task6());
  s2.request_stop();
  scope.sync_join();
  EXPECT_EQ(cancelled.load(), 2);
}

class ChannelEngines : public ::testing::TestWithParam<EngineConfig> {};

// Randomized MPMC: producers send (hopping onto engine workers between
// sends), consumers receive, a closer closes after the producers finish:
// every value is received exactly once, each producer's values in order.
TEST_P(ChannelEngines, MpmcDeliversEveryValueOnceInProducerOrder) {
  const std::uint64_t seed = test_seed("channel");
  std::mt19937_64 rng(seed);
  Engine engine(GetParam().options);
  const int producers = 1 + static_cast<int>(rng() % 4);
  const int consumers = 1 + static_cast<int>(rng() % 4);
  const int per = 50 + static_cast<int>(rng() % 200) / kScale;
  Channel<std::pair<int, int>> ch(1 + rng() % 8);
  std::vector<std::vector<std::pair<int, int>>> got(consumers);
  Var v = engine.new_variable();
  auto producer = [&](int p) -> Task<void> {
    for (int i = 0; i < per; ++i) {
      if ((i + p) % 3 == 0) co_await push(engine, reads(v), writes(), [] {});  // continue on a worker
      co_await ch.send({p, i});
    }
  };
  auto consumer = [&](int c) -> Task<void> {
    while (auto x = co_await ch.receive()) {
      got[c].push_back(*x);
      if (x->second % 5 == 0) co_await push(engine, reads(v), writes(), [] {});
    }
  };
  auto all = [&]() -> Task<void> {
    AsyncScope consumers_scope;
    for (int c = 0; c < consumers; ++c) consumers_scope.spawn(consumer(c));
    std::vector<Task<void>> ps;
    for (int p = 0; p < producers; ++p) ps.push_back(producer(p));
    co_await when_all(std::move(ps));
    ch.close();
    co_await consumers_scope.join();
  };
  run_bounded(all());
  std::vector<int> next(producers, 0);
  std::size_t total = 0;
  for (const auto& g : got) {
    std::vector<int> last(producers, -1);
    for (auto [p, i] : g) {
      EXPECT_GT(i, last[p]) << "seed " << seed << ": a consumer saw producer " << p << " out of order";
      last[p] = i;
    }
    total += g.size();
  }
  EXPECT_EQ(total, static_cast<std::size_t>(producers * per)) << "seed " << seed;
  std::vector<std::vector<bool>> seen(producers, std::vector<bool>(per, false));
  for (const auto& g : got) {
    for (auto [p, i] : g) {
      EXPECT_FALSE(seen[p][i]) << "seed " << seed << ": duplicate";
      seen[p][i] = true;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, ChannelEngines, ::testing::ValuesIn(all_engine_configs()), config_name);

// Plain ops feed a coroutine consumer through try_send (retrying a full
// channel by pushing another op later is the op's business: here the
// capacity is large enough), under ThreadSanitizer too.
TEST(Channel, PlainOpsTrySendToACoroutineConsumer) {
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  const int n = 500 / kScale;
  Channel<int> ch(static_cast<std::size_t>(n));
  long sum = 0;
  AsyncScope scope;
  auto task7 = [&]() -> Task<void> {
    while (auto x = co_await ch.receive()) sum += *x;
  };
  scope.spawn(task7());
  std::atomic<int> failed{0};
  for (int i = 0; i < n; ++i) {
    engine.push_sync([&, i] { if (!ch.try_send(i)) failed.fetch_add(1); }, Context::cpu(), {}, {});
  }
  engine.wait_for_all();
  ch.close();
  scope.sync_join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(sum, static_cast<long>(n) * (n - 1) / 2);
}

}  // namespace
}  // namespace ordo::test
