// Engine::post (work without variables, never on the posting thread) and
// CompletionThread (a reaper that completes ops but never runs user code).
#include <atomic>
#include <future>
#include <thread>
#include <tuple>

#include "test_util.hpp"

namespace ordo::test {
namespace {

class Post : public ::testing::TestWithParam<EngineConfig> {};

TEST_P(Post, RunsOnAnotherThreadAndIsWaitedFor) {
  Engine engine(GetParam().options);
  const auto caller = std::this_thread::get_id();
  std::atomic<int> ran{0};
  std::atomic<bool> same_thread{false};
  for (int i = 0; i < 100; ++i) {
    engine.post([&] {
      if (std::this_thread::get_id() == caller) same_thread = true;
      ran.fetch_add(1);
    });
  }
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 100);
  EXPECT_FALSE(same_thread.load());
}

TEST_P(Post, FromInsideAnOpNeverRunsInsideIt) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable();
  std::atomic<bool> op_returned{false};
  std::atomic<bool> nested{false};
  std::atomic<std::thread::id> op_thread{}, post_thread{};
  engine.push_sync([&] {
    op_thread = std::this_thread::get_id();
    engine.post([&] {
      post_thread = std::this_thread::get_id();
      // On the op's own thread it can only run once the op returned.
      if (post_thread.load() == op_thread.load() && !op_returned.load()) nested = true;
    });
    op_returned = std::this_thread::get_id() == op_thread.load();
  }, Context::cpu(), {}, {a});
  engine.wait_for_all();
  EXPECT_FALSE(nested.load());
  EXPECT_NE(post_thread.load(), std::thread::id{});
  // The naive engine is serial: the post runs right after the op, on its thread.
  if (GetParam().options.kind == EngineKind::naive) {
    EXPECT_EQ(post_thread.load(), op_thread.load());
  }
}

TEST_P(Post, ExceptionIsReportedByWaitForAll) {
  Engine engine(GetParam().options);
  engine.post([] { throw std::runtime_error("posted failure"); }, Context::cpu(), {.name = "poster"});
  try {
    engine.wait_for_all();
    FAIL() << "wait_for_all did not rethrow the posted op's exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "posted failure");
  }
  EXPECT_NO_THROW(engine.wait_for_all());
}

TEST_P(Post, IsNotHeldBackByMaxInFlight) {
  Options opts = GetParam().options;
  opts.max_in_flight = 2;
  Engine engine(opts);
  Var a = engine.new_variable();
  // An async op on `a` that only this thread completes (its body has run
  // before anything else is pushed, so nothing races to fill `held`)...
  std::promise<OnComplete> held;
  engine.push_async([&](RunContext, OnComplete done) { held.set_value(std::move(done)); }, Context::cpu(), {}, {a});
  OnComplete done = held.get_future().get();
  // ...and two ops queued behind it fill the window...
  std::atomic<int> behind{0};
  for (int i = 0; i < 2; ++i) {
    engine.push_sync([&](RunContext) { behind.fetch_add(1, std::memory_order_relaxed); }, Context::cpu(), {}, {a});
  }
  // ...yet a post goes through at once and runs.
  std::promise<void> ran;
  engine.post([&] { ran.set_value(); });
  EXPECT_EQ(ran.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(behind.load(), 0);
  done();
  engine.wait_for_all();
  EXPECT_EQ(behind.load(), 2);
}

TEST_P(Post, DeleteVarPropertyIsRejected) {
  Engine engine(GetParam().options);
  EXPECT_THROW(engine.post([] {}, Context::cpu(), {.prop = FnProperty::delete_var}), Error);
  engine.wait_for_all();
}

TEST_P(Post, DestructorDrainsPosts) {
  std::atomic<int> ran{0};
  {
    Engine engine(GetParam().options);
    for (int i = 0; i < 1000; ++i) engine.post([&] { ran.fetch_add(1, std::memory_order_relaxed); });
  }
  EXPECT_EQ(ran.load(), 1000);
}

INSTANTIATE_TEST_SUITE_P(AllEngines, Post, ::testing::ValuesIn(all_engine_configs()), config_name);

class CompletionThreadTest : public ::testing::TestWithParam<EngineConfig> {};

/// Completes `done` (with `error`) from a fresh thread marked as a completion
/// thread; returns that thread's id.
std::thread::id complete_from_reaper(OnComplete done, std::exception_ptr error = nullptr) {
  std::thread::id id;
  std::thread reaper([&] {
    const CompletionThread scope;
    id = std::this_thread::get_id();
    EXPECT_TRUE(CompletionThread::active());
    done(error);
  });
  reaper.join();
  return id;
}

TEST_P(CompletionThreadTest, DependantsNeverRunOnIt) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable();
  std::promise<OnComplete> handed;
  engine.push_async([&](RunContext, OnComplete done) { handed.set_value(done); }, Context::cpu(), {}, {a});
  std::atomic<std::thread::id> ran_on{};
  for (int i = 0; i < 3; ++i) {
    engine.push_sync([&] { ran_on = std::this_thread::get_id(); }, Context::cpu(), {a}, {},
                     {.prop = i == 2 ? FnProperty::async : FnProperty::normal});
  }
  const std::thread::id reaper = complete_from_reaper(handed.get_future().get());
  engine.wait_for_all();
  EXPECT_NE(ran_on.load(), reaper);
  EXPECT_NE(ran_on.load(), std::thread::id{});
}

TEST_P(CompletionThreadTest, SkippedDependantsAreDestroyedOnAWorker) {
  // A skipped op's body is destroyed, not called; that destructor may resume a
  // coroutine, so it must not run on the reaper either.
  Engine engine(GetParam().options);
  Var a = engine.new_variable(), b = engine.new_variable();
  std::promise<OnComplete> handed;
  engine.push_async([&](RunContext, OnComplete done) { handed.set_value(done); }, Context::cpu(), {}, {a});
  struct Probe {
    std::atomic<std::thread::id>* where;
    bool armed = true;
    Probe(std::atomic<std::thread::id>* w) : where(w) {}
    Probe(Probe&& o) noexcept : where(o.where) { o.armed = false; }
    ~Probe() {
      if (armed && Engine::skip_reason()) *where = std::this_thread::get_id();
    }
    void operator()() const {}
  };
  std::atomic<std::thread::id> destroyed_on{};
  engine.push_sync(Probe{&destroyed_on}, Context::cpu(), {a}, {b});
  const std::thread::id reaper =
      complete_from_reaper(handed.get_future().get(), std::make_exception_ptr(std::runtime_error("io failed")));
  EXPECT_THROW(engine.wait_for_var(b), std::runtime_error);
  // wait_for_var returns once b's write is released, which the skipped op
  // does before its body is destroyed; wait_for_all waits for the whole op.
  EXPECT_NO_THROW(engine.wait_for_all());  // the one error was rethrown by wait_for_var(b)
  EXPECT_NE(destroyed_on.load(), std::thread::id{});
  EXPECT_NE(destroyed_on.load(), reaper);
}

TEST_P(CompletionThreadTest, PostsFromItRunElsewhere) {
  Engine engine(GetParam().options);
  std::atomic<std::thread::id> ran_on{};
  std::thread::id reaper;
  std::thread t([&] {
    const CompletionThread scope;
    reaper = std::this_thread::get_id();
    engine.post([&] { ran_on = std::this_thread::get_id(); });
  });
  t.join();
  engine.wait_for_all();
  EXPECT_NE(ran_on.load(), reaper);
  EXPECT_NE(ran_on.load(), std::thread::id{});
}

TEST(CompletionThreadScope, Nests) {
  EXPECT_FALSE(CompletionThread::active());
  {
    const CompletionThread outer;
    {
      const CompletionThread inner;
      EXPECT_TRUE(CompletionThread::active());
    }
    EXPECT_TRUE(CompletionThread::active());
  }
  EXPECT_FALSE(CompletionThread::active());
}

INSTANTIATE_TEST_SUITE_P(AllEngines, CompletionThreadTest, ::testing::ValuesIn(all_engine_configs()), config_name);

}  // namespace
}  // namespace ordo::test

namespace ordo::test {
namespace {

// Engine::on_worker_of: where a post to a CPU context could run right now.
TEST(OnWorkerOf, TrueOnlyOnThisEnginesCpuWorkers) {
  for (EngineKind kind : {EngineKind::pooled, EngineKind::per_device}) {
    Engine engine(Options{.kind = kind, .cpu_workers = 2});
    Engine other(Options{.kind = kind, .cpu_workers = 1});
    EXPECT_FALSE(engine.on_worker_of(Context::cpu())) << "the main thread is no worker";
    std::promise<std::tuple<bool, bool, bool, bool>> seen;
    engine.push_sync([&] {
      bool in_scope = true;
      {
        const CompletionThread scope;
        in_scope = engine.on_worker_of(Context::cpu());
      }
      seen.set_value({engine.on_worker_of(Context::cpu()), other.on_worker_of(Context::cpu()),
                      engine.on_worker_of(Context::gpu(0)), in_scope});
    }, Context::cpu(), {}, {});
    auto [mine, others, gpu, in_scope] = seen.get_future().get();
    EXPECT_TRUE(mine) << to_string(kind);
    EXPECT_FALSE(others) << to_string(kind) << ": a worker of another engine";
    EXPECT_FALSE(gpu) << to_string(kind) << ": GPU contexts are never claimed";
    EXPECT_FALSE(in_scope) << to_string(kind) << ": a CompletionThread scope never runs user code";
    engine.wait_for_all();
  }
  Engine naive(Options{.kind = EngineKind::naive});
  bool inside = true;
  naive.push_sync([&] { inside = naive.on_worker_of(Context::cpu()); }, Context::cpu(), {}, {});
  naive.wait_for_all();
  EXPECT_FALSE(inside) << "the naive engine has no workers: its ops run on the pushing thread";
}

}  // namespace
}  // namespace ordo::test
