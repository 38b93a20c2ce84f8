// Where op bodies run (docs/guide.md, "Where ops run"): every push is
// asynchronous. The pooled and per-device engines never run an op body on a
// thread that did not ask to run ops: not inside any push form, a delete, a
// post or wait_for_var, not while max_in_flight holds the pusher, however
// many short ops ran before. Only OpAttrs::inline_ok opts an op in
// (tests/core/inline_ok_test.cpp).
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace ordo::test {
namespace {

struct PlacementCase {
  std::string label;
  EngineKind kind;
  unsigned workers;
};
void PrintTo(const PlacementCase& c, std::ostream* os) { *os << c.label; }

std::vector<PlacementCase> placement_cases() {
  std::vector<PlacementCase> out;
  for (EngineKind kind : {EngineKind::pooled, EngineKind::per_device}) {
    for (unsigned w : {1U, 2U, 4U}) {
      out.push_back({std::string(to_string(kind)) + "_" + std::to_string(w), kind, w});
    }
  }
  return out;
}

class Placement : public ::testing::TestWithParam<PlacementCase> {
 protected:
  Options options() const {
    return Options{.kind = GetParam().kind, .cpu_workers = GetParam().workers};
  }
};

/// Counts bodies that ran on the thread that created it.
struct OnThisThread {
  std::thread::id me = std::this_thread::get_id();
  std::atomic<int> ran{0};
  std::atomic<int> here{0};
  void note() {
    ran.fetch_add(1, std::memory_order_relaxed);
    if (std::this_thread::get_id() == me) here.fetch_add(1, std::memory_order_relaxed);
  }
};

/// Opens `gate` and fails the test if `done` is not opened within `limit`:
/// a deadlock becomes a failure that names itself instead of a hang.
class Watchdog {
 public:
  Watchdog(Gate& gate, const char* what, std::chrono::seconds limit = std::chrono::seconds(60))
      : thread_([this, &gate, what, limit] {
          if (!done_.wait(limit)) {
            ADD_FAILURE() << what;
            gate.open();
          }
        }) {}
  ~Watchdog() {
    done_.open();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  Gate done_;
  std::thread thread_;
};

TEST_P(Placement, AReaderThatWaitsForItsPusherDoesNotHoldIt) {
  // MXNet's threaded engine allows an op to wait for what its pusher does
  // after the push: R1 waits for the latch this thread opens after pushing
  // X and R2 behind it.
  for (int round = 0; round < 50 / kScale; ++round) {
    Engine engine(options());
    Var u = engine.new_variable();
    Gate latch;
    OnThisThread where;
    std::atomic<bool> r1_saw_latch{false};
    {
      Watchdog dog(latch, "R1 held its pusher: it ran inside a push");
      engine.push_sync([&] {
        where.note();
        r1_saw_latch.store(latch.wait());
      }, Context::cpu(), {u}, {}, {.name = "R1"});
      engine.push_sync([&] { where.note(); }, Context::cpu(), {u}, {u}, {.name = "X"});
      engine.push_sync([&] { where.note(); }, Context::cpu(), {u}, {}, {.name = "R2"});
      latch.open();
      engine.wait_for_all();
    }
    ASSERT_TRUE(r1_saw_latch.load());
    ASSERT_EQ(where.ran.load(), 3);
    ASSERT_EQ(where.here.load(), 0) << "round " << round;
  }
}

TEST_P(Placement, AfterManyShortOpsABlockingOpStillGoesToAWorker) {
  // However many short ops ran before, an op that blocks on something the
  // pusher does next runs on a worker, and the ops queued behind it (more
  // than max_in_flight) do not hold the pusher for ever.
  const long warm = kScale == 1 ? 10'000'000L : 150'000L;
  const int behind = kScale == 1 ? 1'000'000 : 20'000;
  Engine engine(options());
  Var v = engine.new_variable();
  OnThisThread where;
  std::uint64_t sum = 0;  // written by the ops on v only, in push order
  for (long i = 0; i < warm; ++i) {
    engine.push_sync([&sum, i] { sum += static_cast<std::uint64_t>(i); }, Context::cpu(), {}, {v});
  }
  engine.wait_for_all();
  ASSERT_EQ(sum, static_cast<std::uint64_t>(warm) * static_cast<std::uint64_t>(warm - 1) / 2);
  Gate latch;
  std::atomic<bool> saw_latch{false};
  {
    Watchdog dog(latch, "the blocking op held its pusher");
    engine.push_sync([&] {
      where.note();
      saw_latch.store(latch.wait());
    }, Context::cpu(), {}, {v}, {.name = "blocking"});
    for (int i = 0; i < behind; ++i) engine.push_sync([&] { where.note(); }, Context::cpu(), {}, {v});
    latch.open();
    engine.wait_for_all();
  }
  EXPECT_TRUE(saw_latch.load());
  EXPECT_EQ(where.ran.load(), behind + 1);
  EXPECT_EQ(where.here.load(), 0);
}

TEST_P(Placement, NoPushFormRunsABodyOnThePushingThread) {
  Engine engine(options());
  OnThisThread where;
  std::vector<Var> many;
  for (int i = 0; i < 12; ++i) many.push_back(engine.new_variable());
  Var v = many[0];
  auto sync_body = [&where] { where.note(); };
  auto async_body = [&where](RunContext, OnComplete done) {
    where.note();
    done();
  };
  Operator sync_op = engine.new_operator(sync_body, {}, {v}, {.name = "sync operator"});
  Operator async_op = engine.new_operator(async_body, {v}, {}, {.name = "async operator"});
  int expected = 0;
  for (int round = 0; round < 200; ++round) {
    // Each form once with its variables free (ready at push), once behind another op.
    for (int ready = 0; ready < 2; ++ready) {
      if (ready == 0) engine.wait_for_all();
      engine.push_sync([&where] { where.note(); }, Context::cpu(), {}, {v});  // rvalue
      engine.push_sync(sync_body, Context::cpu(), {}, {v});                    // lvalue: a copy
      for (FnProperty prop : {FnProperty::normal, FnProperty::cpu_prioritized, FnProperty::copy_to_device,
                              FnProperty::copy_from_device, FnProperty::async}) {
        engine.push_sync(sync_body, Context::cpu(), {}, {v}, {.prop = prop});
        engine.push_async(async_body, Context::cpu(), {v}, {}, {.prop = prop});
      }
      engine.push_sync(sync_body, Context::cpu(), std::span(many).first(6), std::span(many).subspan(6));
      engine.push(sync_op, Context::cpu());
      engine.push(sync_op, Context::cpu(), 3);
      engine.push(async_op, Context::cpu());
      engine.post(sync_body);
      Var doomed = engine.new_variable();
      engine.push_sync(sync_body, Context::cpu(), {}, {doomed});
      engine.delete_variable(sync_body, Context::cpu(), doomed);
      expected += 2 + 10 + 1 + 3 + 1 + 2;
      // The push's own thread waits: the ops on v must still run elsewhere.
      engine.push_sync(sync_body, Context::cpu(), {}, {v});
      engine.wait_for_var(v);
      expected += 1;
    }
  }
  engine.wait_for_all();
  engine.delete_operator(sync_op);
  engine.delete_operator(async_op);
  EXPECT_EQ(where.ran.load(), expected);
  EXPECT_EQ(where.here.load(), 0);
}

TEST_P(Placement, APusherHeldByTheBoundOnlyWaits) {
  Options o = options();
  o.max_in_flight = 64;
  Engine engine(o);
  std::vector<Var> vars;
  for (int i = 0; i < 8; ++i) vars.push_back(engine.new_variable());
  OnThisThread where;
  std::size_t peak = 0;
  const int n = 20'000 / kScale;
  for (int i = 0; i < n; ++i) {
    engine.push_sync([&where] {
      where.note();
      busy_for(std::chrono::microseconds(2));
    }, Context::cpu(), {}, {vars[static_cast<std::size_t>(i) % vars.size()]});
    peak = std::max(peak, engine.in_flight());
  }
  engine.wait_for_all();
  EXPECT_EQ(where.ran.load(), n);
  EXPECT_EQ(where.here.load(), 0) << "a held pusher ran ops";
  // Held at the bound; a stall (no op finished for 10 ms, EngineCore::
  // throttle) lets the pusher one bound further, which a loaded machine
  // shows now and then: a few such bounds, never the whole trace.
  EXPECT_LE(peak, 4 * 64U + 1U + o.cpu_workers) << "the pusher was not held at the bound";
}

TEST_P(Placement, ACompletionThreadRunsNoUserBodyEvenInlineOk) {
  Engine engine(options());
  OnThisThread where;
  {
    const CompletionThread delivering;
    for (int i = 0; i < 100; ++i) {
      engine.push_sync([&where] { where.note(); }, Context::cpu(), {}, {engine.new_variable()},
                       {.inline_ok = true});  // inline_ok, but this thread runs no user code
    }
  }
  engine.wait_for_all();
  EXPECT_EQ(where.ran.load(), 100);
  EXPECT_EQ(where.here.load(), 0);
}

std::string case_name(const ::testing::TestParamInfo<PlacementCase>& p) { return p.param.label; }
INSTANTIATE_TEST_SUITE_P(Engines, Placement, ::testing::ValuesIn(placement_cases()), case_name);

}  // namespace
}  // namespace ordo::test
