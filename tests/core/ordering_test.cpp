// The ordering rule, piece by piece: write-write, read-write, write-read in
// push order; reads of one variable genuinely overlap; priority order on the
// priority pool; FIFO elsewhere; naive runs inline in push order.
#include <atomic>
#include <thread>

#include "test_util.hpp"

namespace ordo::test {
namespace {

/// Records the order in which op bodies start and end.
class Log {
 public:
  void add(int x) {
    std::lock_guard lock(m_);
    events_.push_back(x);
  }
  std::vector<int> events() {
    std::lock_guard lock(m_);
    return events_;
  }

 private:
  std::mutex m_;
  std::vector<int> events_;
};

class Ordering : public ::testing::TestWithParam<EngineConfig> {};

TEST_P(Ordering, ConflictingOpsRunInPushOrder) {
  Engine engine(GetParam().options);
  Var v = engine.new_variable();
  Log log;
  // W R R W R W W: each write must see every earlier access finished.
  const std::vector<bool> is_write = {true, false, false, true, false, true, true, false, false, true};
  std::atomic<int> running_writes{0}, running_reads{0};
  std::atomic<bool> violation{false};
  for (int round = 0; round < 200; ++round) {
    for (std::size_t k = 0; k < is_write.size(); ++k) {
      const int id = round * 100 + static_cast<int>(k);
      if (is_write[k]) {
        engine.push_sync(
            [&, id] {
              if (running_writes.fetch_add(1) != 0 || running_reads.load() != 0) violation = true;
              log.add(id);
              running_writes.fetch_sub(1);
            },
            Context::cpu(), {}, {v});
      } else {
        engine.push_sync(
            [&, id] {
              running_reads.fetch_add(1);
              if (running_writes.load() != 0) violation = true;
              log.add(id);
              running_reads.fetch_sub(1);
            },
            Context::cpu(), {v}, {});
      }
    }
  }
  engine.wait_for_all();
  EXPECT_FALSE(violation.load()) << "a write overlapped another access of the same variable";
  // Every write is logged after all accesses pushed before it, and before all after it.
  const auto events = log.events();
  ASSERT_EQ(events.size(), 200 * is_write.size());
  std::vector<int> pos(200 * 100, -1);
  for (std::size_t i = 0; i < events.size(); ++i) pos[static_cast<std::size_t>(events[i])] = static_cast<int>(i);
  std::vector<int> order;  // push order of ids
  for (int round = 0; round < 200; ++round) {
    for (std::size_t k = 0; k < is_write.size(); ++k) order.push_back(round * 100 + static_cast<int>(k));
  }
  for (std::size_t i = 0; i < order.size(); ++i) {
    const bool w = is_write[i % is_write.size()];
    for (std::size_t j = i + 1; j < order.size(); ++j) {
      const bool wj = is_write[j % is_write.size()];
      if (w || wj) {
        ASSERT_LT(pos[static_cast<std::size_t>(order[i])], pos[static_cast<std::size_t>(order[j])])
            << "conflicting ops " << order[i] << " and " << order[j] << " ran out of push order";
      }
      if (j > i + 12) break;  // conflicts are transitive: checking a window suffices
    }
  }
}

TEST_P(Ordering, ReadsOfOneVariableOverlap) {
  const Options& o = GetParam().options;
  if (o.kind == EngineKind::naive || o.cpu_workers < 2) GTEST_SKIP() << "needs two workers";
  Engine engine(o);
  Var v = engine.new_variable();
  // Both readers must be inside their bodies at once to pass the rendezvous.
  Counter arrived;
  std::atomic<int> passed{0};
  for (int i = 0; i < 2; ++i) {
    engine.push_sync(
        [&] {
          arrived.arrive();
          if (arrived.wait_for(2)) passed.fetch_add(1);
        },
        Context::cpu(), {v}, {});
  }
  engine.wait_for_all();
  EXPECT_EQ(passed.load(), 2) << "two reads of one variable did not run concurrently";
}

TEST_P(Ordering, IndependentWritesOverlap) {
  const Options& o = GetParam().options;
  if (o.kind == EngineKind::naive || o.cpu_workers < 2) GTEST_SKIP() << "needs two workers";
  Engine engine(o);
  Var a = engine.new_variable(), b = engine.new_variable();
  Counter arrived;
  std::atomic<int> passed{0};
  for (Var v : {a, b}) {
    engine.push_sync(
        [&] {
          arrived.arrive();
          if (arrived.wait_for(2)) passed.fetch_add(1);
        },
        Context::cpu(), {}, {v});
  }
  engine.wait_for_all();
  EXPECT_EQ(passed.load(), 2);
}

TEST_P(Ordering, MultiVariableOpWaitsForAllItsInputs) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable(), b = engine.new_variable(), c = engine.new_variable();
  for (int round = 0; round < 500; ++round) {
    std::atomic<int> done{0};
    int x = 0, y = 0, z = 0;
    engine.push_sync([&] { x = round; done.fetch_add(1); }, Context::cpu(), {}, {a});
    engine.push_sync([&] { y = round; done.fetch_add(1); }, Context::cpu(), {}, {b});
    engine.push_sync([&] { z = x + y; EXPECT_EQ(done.load(), 2); }, Context::cpu(), {a, b}, {c});
    engine.wait_for_var(c);
    ASSERT_EQ(z, 2 * round);
  }
}

INSTANTIATE_TEST_SUITE_P(AllEngines, Ordering, ::testing::ValuesIn(all_engine_configs()), config_name);

TEST(OrderingPolicy, PriorityPoolRunsHighestPriorityFirst) {
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2, .cpu_priority_workers = 1});
  Gate gate;
  Counter started;
  // Occupy the single priority worker so the rest queue up behind it.
  engine.push_sync([&] { started.arrive(); ASSERT_TRUE(gate.wait()); }, Context::cpu(), {}, {},
                   {.prop = FnProperty::cpu_prioritized});
  ASSERT_TRUE(started.wait_for(1));
  Log log;
  const std::vector<int> priorities = {1, 5, 3, 5, 0, 9, 3, 1};
  for (std::size_t i = 0; i < priorities.size(); ++i) {
    const int id = static_cast<int>(i);
    engine.push_sync([&log, id] { log.add(id); }, Context::cpu(), {}, {},
                     {.prop = FnProperty::cpu_prioritized, .priority = priorities[i]});
  }
  gate.open();
  engine.wait_for_all();
  // Highest priority first; equal priorities in push order.
  EXPECT_EQ(log.events(), (std::vector<int>{5, 1, 3, 2, 6, 0, 7, 4}));
}

TEST(OrderingPolicy, FifoWherePriorityIsNotHonoured) {
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 1});
  Gate gate;
  Counter started;
  engine.push_sync([&] { started.arrive(); ASSERT_TRUE(gate.wait()); }, Context::cpu(), {}, {});
  ASSERT_TRUE(started.wait_for(1));
  Log log;
  for (int i = 0; i < 8; ++i) {
    engine.push_sync([&log, i] { log.add(i); }, Context::cpu(), {}, {}, {.priority = (i * 7) % 5});
  }
  gate.open();
  engine.wait_for_all();
  EXPECT_EQ(log.events(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(OrderingPolicy, FifoHoldsWhileTheQueueWrapsAndGrows) {
  // The CPU pool's queue is a ring of 4096 slots that doubles when full.
  // One worker, held by a gate while ready ops queue behind it: the first
  // round leaves the ring's start mid-array, the second then queues 10000
  // (wrapping, and growing twice while wrapped); both run in push order.
  // No bound, so every op is queued.
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 1, .max_in_flight = 0});
  for (const int ops : {3000, 10000}) {
    Gate gate;
    Counter started;
    engine.push_sync([&] { started.arrive(); ASSERT_TRUE(gate.wait()); }, Context::cpu(), {}, {});
    ASSERT_TRUE(started.wait_for(1));
    std::vector<int> order;  // written by the single worker only
    order.reserve(static_cast<std::size_t>(ops));
    for (int i = 0; i < ops; ++i) engine.push_sync([&order, i] { order.push_back(i); }, Context::cpu(), {}, {});
    EXPECT_EQ(engine.in_flight(), static_cast<std::size_t>(ops) + 1) << "ops ran before the gate opened";
    gate.open();
    engine.wait_for_all();
    ASSERT_EQ(order.size(), static_cast<std::size_t>(ops));
    for (int i = 0; i < ops; ++i) ASSERT_EQ(order[static_cast<std::size_t>(i)], i) << "round of " << ops;
  }
}

TEST(OrderingPolicy, ReadersReleasedTogetherRunByPriority) {
  // One completion makes every reader ready at once; they reach the
  // priority queue together (QueueBatch) and still run highest first.
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 1, .cpu_priority_workers = 1});
  const Var v = engine.new_variable();
  Gate gate;
  Counter started;
  engine.push_sync([&] { started.arrive(); ASSERT_TRUE(gate.wait()); }, Context::cpu(), {}, {v},
                   {.prop = FnProperty::cpu_prioritized});
  ASSERT_TRUE(started.wait_for(1));
  Log log;
  const std::vector<int> priorities = {2, 7, 0, 7, 4, 1};
  for (std::size_t i = 0; i < priorities.size(); ++i) {
    const int id = static_cast<int>(i);
    engine.push_sync([&log, id] { log.add(id); }, Context::cpu(), {v}, {},
                     {.prop = FnProperty::cpu_prioritized, .priority = priorities[i]});
  }
  gate.open();
  engine.wait_for_all();
  EXPECT_EQ(log.events(), (std::vector<int>{1, 3, 4, 0, 5, 2}));
}

TEST(OrderingPolicy, ReadersReleasedTogetherRunInPushOrderWhileTheQueueGrows) {
  // A writer held by a gate, then more readers than the ring's 4096 slots:
  // its completion queues them all at once, growing the ring on the way
  // (WorkerPool::enqueue_list); one worker runs them in push order.
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 1, .max_in_flight = 0});
  const Var v = engine.new_variable();
  Gate gate;
  Counter started;
  engine.push_sync([&] { started.arrive(); ASSERT_TRUE(gate.wait()); }, Context::cpu(), {}, {v});
  ASSERT_TRUE(started.wait_for(1));
  constexpr int kReaders = 10000;
  std::vector<int> order;  // written by the single worker only
  order.reserve(kReaders);
  for (int i = 0; i < kReaders; ++i) engine.push_sync([&order, i] { order.push_back(i); }, Context::cpu(), {v}, {});
  gate.open();
  engine.wait_for_all();
  ASSERT_EQ(order.size(), static_cast<std::size_t>(kReaders));
  for (int i = 0; i < kReaders; ++i) ASSERT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST(OrderingPolicy, ConcurrentPushersGrowTheQueueWithoutLosingOrder) {
  // Four threads queue ready ops behind one gated worker at once, so the
  // ring grows (8x) while others queue: each op runs exactly once, and each
  // pusher's ops in its push order.
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 1, .max_in_flight = 0});
  Gate gate;
  Counter started;
  engine.push_sync([&] { started.arrive(); ASSERT_TRUE(gate.wait()); }, Context::cpu(), {}, {});
  ASSERT_TRUE(started.wait_for(1));
  constexpr int kThreads = 4;
  constexpr int kEach = 8000;
  std::vector<std::vector<int>> seen(kThreads);  // written by the single worker only
  {
    std::vector<std::jthread> pushers;
    for (int t = 0; t < kThreads; ++t) {
      pushers.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          engine.push_sync([&seen, t, i] { seen[static_cast<std::size_t>(t)].push_back(i); }, Context::cpu(), {}, {});
        }
      });
    }
  }
  EXPECT_EQ(engine.in_flight(), static_cast<std::size_t>(kThreads * kEach) + 1) << "ops ran before the gate opened";
  gate.open();
  engine.wait_for_all();
  for (int t = 0; t < kThreads; ++t) {
    const auto& v = seen[static_cast<std::size_t>(t)];
    ASSERT_EQ(v.size(), static_cast<std::size_t>(kEach)) << "pusher " << t;
    for (int i = 0; i < kEach; ++i) ASSERT_EQ(v[static_cast<std::size_t>(i)], i) << "pusher " << t;
  }
}

TEST(OrderingPolicy, NaiveRunsInlineInPushOrder) {
  Engine engine(Options{.kind = EngineKind::naive});
  Var v = engine.new_variable();
  const auto caller = std::this_thread::get_id();
  std::vector<int> seen;
  for (int i = 0; i < 10; ++i) {
    engine.push_sync([&, i] {
      EXPECT_EQ(std::this_thread::get_id(), caller);
      seen.push_back(i);
    }, Context::cpu(), {}, {v});
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(i + 1)) << "naive engine did not run the op inside push";
  }
}

TEST(OrderingPolicy, DuplicatesAndReadWriteOfSameVarCountAsOneWrite) {
  // MXNet deadlocks on both; here they are one write access.
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2});
  Var a = engine.new_variable();
  int x = 0;
  engine.push_sync([&] { ++x; }, Context::cpu(), {}, {a, a, a});
  engine.push_sync([&] { ++x; }, Context::cpu(), {a}, {a});
  engine.push_sync([&] { ++x; }, Context::cpu(), {a, a}, {a});
  engine.wait_for_all();
  EXPECT_EQ(x, 3);
  EXPECT_EQ(engine.var_version(a), 3U) << "each counts as exactly one write";
}

TEST(OrderingPolicy, ListsWithDuplicatesAcrossAccessBlockSizesKeepTheirOrder) {
  // A push locks its lists as given; a variable listed twice sends it to the
  // sorted, merged path, which may move the op's accesses out of their block
  // into the record (4 -> 3) or keep the block (6 -> 5); 18 listed is more
  // than a push gathers on its stack: sorted and merged before it is
  // prepared. Every op is one write of each variable it names, in push order.
  for (const EngineKind kind : {EngineKind::naive, EngineKind::pooled, EngineKind::per_device}) {
    Engine engine(Options{.kind = kind, .cpu_workers = 2});
    std::vector<Var> v;
    for (int i = 0; i < 20; ++i) v.push_back(engine.new_variable());
    std::vector<int> order;
    auto op = [&order](int id) { return [&order, id] { order.push_back(id); }; };
    engine.push_sync(op(0), Context::cpu(), {}, {v[0], v[1], v[2], v[0]});
    engine.push_sync(op(1), Context::cpu(), {v[3]}, {v[0], v[1], v[2], v[3], v[4]});
    std::vector<Var> many(v.begin(), v.begin() + 17);
    many.push_back(v[2]);
    engine.push_sync(op(2), Context::cpu(), {}, many);
    engine.push_sync(op(3), Context::cpu(), {v[1]}, {v[1]});
    engine.wait_for_all();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3})) << to_string(kind);
    EXPECT_EQ(engine.var_version(v[0]), 3U) << to_string(kind);
    EXPECT_EQ(engine.var_version(v[1]), 4U) << to_string(kind);
    EXPECT_EQ(engine.var_version(v[2]), 3U) << to_string(kind);
    EXPECT_EQ(engine.var_version(v[3]), 2U) << to_string(kind) << ": read and written, one write";
    EXPECT_EQ(engine.var_version(v[16]), 1U) << to_string(kind);
    EXPECT_EQ(engine.var_version(v[17]), 0U) << to_string(kind);
    // A stale handle in a list pushed as given: refused, naming the variable.
    Var gone = v[19];
    engine.delete_variable(gone);
    try {
      engine.push_sync([] {}, Context::cpu(), {v[5]}, {v[6], gone});
      ADD_FAILURE() << to_string(kind) << ": a push of a deleted variable was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::deleted_var) << to_string(kind);
      EXPECT_NE(std::string(e.what()).find("var " + std::to_string(gone.id())), std::string::npos) << e.what();
    }
    engine.wait_for_all();
  }
}

TEST(OrderingPolicy, GpuContextsRouteToDeviceWorkers) {
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 1});
  Var v = engine.new_variable();
  std::mutex m;
  std::vector<std::pair<std::thread::id, int>> seen;
  auto record = [&](const RunContext& rc) {
    std::lock_guard lock(m);
    seen.emplace_back(std::this_thread::get_id(), rc.ctx.device_id);
  };
  engine.push_sync(record, Context::cpu(), {}, {v});
  engine.push_sync(record, Context::gpu(1), {}, {v});
  engine.push_sync(record, Context::gpu(1), {}, {v}, {.prop = FnProperty::copy_to_device});
  engine.push_sync(record, Context::gpu(1), {}, {v}, {.prop = FnProperty::copy_from_device});
  engine.wait_for_all();
  ASSERT_EQ(seen.size(), 4U);
  EXPECT_EQ(seen[1].second, 1);
  // cpu, gpu compute, copy-in and copy-out are four different workers.
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t j = i + 1; j < 4; ++j) EXPECT_NE(seen[i].first, seen[j].first) << i << " vs " << j;
  }
  EXPECT_THROW(engine.push_sync([] {}, Context::gpu(1000), {}, {v}), Error);
}

}  // namespace
}  // namespace ordo::test
