// ordo::AutoCapture: iterations that repeat are replayed with their own
// bodies, the others pushed and learned; either way the program behaves as
// if it had pushed each iteration's ops at the end of run().
#include <atomic>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/differential_trace.hpp"
#include "core/test_util.hpp"
#include "graph/graph_test_util.hpp"
#include "ordo/coro.hpp"
#include "ordo/graph.hpp"

namespace ordo::test {
namespace {

constexpr int kVars = 48;

/// How an iteration differs from the trace: not at all, an op appended, one
/// op's write on another variable, one op's body of another type. Iterations
/// of one variant push the same ops (their bodies' captured values aside).
enum class Variant { same, extra_op, other_var, other_body };
constexpr Variant kPlan[] = {Variant::same,      Variant::same,       Variant::same, Variant::extra_op,
                             Variant::extra_op,  Variant::same,       Variant::other_var, Variant::same,
                             Variant::same,      Variant::same,       Variant::other_body, Variant::same,
                             Variant::same,      Variant::extra_op,   Variant::same, Variant::same};
constexpr int kReps = static_cast<int>(std::size(kPlan));

/// The first op at or after `from` that is not an operator and is sync.
std::size_t plain_sync_op(const Trace& t, std::size_t from) {
  for (std::size_t i = from; i < t.ops.size(); ++i) {
    if (!is_operator(t, i) && (t.ops[i].kind == Kind::sync || t.ops[i].kind == Kind::oper)) return i;
  }
  return t.ops.size();
}

/// One iteration's ops: the trace's, changed as `v` says, and each op's
/// index as its body folds it in (an operator's own; else one per op and
/// iteration, captured by value: a replay that ran an earlier iteration's
/// bodies would fold in the wrong one).
struct Iteration {
  std::vector<OpSpec> ops;
  std::vector<std::size_t> index;
  std::size_t other_body = ~std::size_t{0};  ///< the op pushed with another body type
};

Iteration iteration(const Trace& t, int rep) {
  const Variant v = kPlan[rep];
  Iteration it;
  it.ops = t.ops;
  const std::size_t n = t.ops.size();
  for (std::size_t i = 0; i < n; ++i) {
    it.index.push_back(is_operator(t, i) ? i : i + static_cast<std::size_t>(rep) * (n + 1) + 1000);
  }
  if (v == Variant::extra_op) {
    it.ops.push_back(OpSpec{.reads = {1, 2}, .writes = {3}});
    it.index.push_back(n + static_cast<std::size_t>(rep) * (n + 1) + 1000);
  } else if (v == Variant::other_var) {
    OpSpec& op = it.ops[plain_sync_op(t, n / 2)];
    op.writes[0] = (op.writes[0] + 1) % kVars;
  } else if (v == Variant::other_body) {
    it.other_body = plain_sync_op(t, n / 3);
  }
  return it;
}

/// The counters run() must reach: an iteration is replayed when it pushes
/// what the last pushed one did (what was learned), else pushed.
std::pair<int, int> expected_counts() {
  int replayed = 0;
  int pushed = 0;
  bool learned = false;
  Variant last = Variant::same;
  for (const Variant v : kPlan) {
    if (learned && v == last) {
      ++replayed;
    } else {
      ++pushed;
      learned = true;
      last = v;
    }
  }
  return {replayed, pushed};
}

enum class Mode { pushed, automatic, automatic_profiled };

struct Outcome {
  std::vector<std::uint64_t> vals;
  int foreign_seen_bad = 0;
  std::uint64_t replayed = 0;
  std::uint64_t pushed = 0;
};

Outcome run(const Trace& t, const std::vector<Iteration>& its, const SerialHistory& history, const EngineConfig& cfg,
            Mode mode, std::uint64_t seed) {
  Outcome out;
  out.vals.assign(kVars, 0);
  std::vector<std::uint64_t>& vals = out.vals;
  ThreadExecutor completer;  // completes async ops; outlives the engine
  {
    Options options = cfg.options;
    if (mode == Mode::automatic_profiled) options.profile.enabled = true;
    Engine engine(options);
    TraceOps trace(engine, t, vals, cfg.inline_ok, completer);
    auto push_iteration = [&](const Iteration& it) {
      for (std::size_t i = 0; i < it.ops.size(); ++i) {
        const OpSpec& op = it.ops[i];
        const std::size_t index = it.index[i];
        if (i < t.ops.size() && is_operator(t, i)) {
          trace.push_operator(i);
        } else if (i == it.other_body) {
          auto [reads, writes] = trace.lists(op);
          engine.push_sync([&op, index, &vals]() mutable { apply_op(op, index, vals); }, Context::cpu(), reads,
                           writes, {.inline_ok = cfg.inline_ok});
        } else {
          trace.push(op, [index] { return index; });
        }
      }
    };
    ForeignPushers foreign(engine, trace.vars(), vals, history, seed);
    AutoCapture loop(engine);
    for (const Iteration& it : its) {
      if (mode == Mode::pushed) {
        push_iteration(it);
      } else {
        loop.run([&] { push_iteration(it); });
      }
    }
    foreign.stop();
    out.foreign_seen_bad = foreign.bad();
    engine.wait_for_all();
    out.replayed = loop.replayed();
    out.pushed = loop.pushed();
  }
  return out;
}

TEST(AutoCaptureEquivalence, IterationsMatchPushedAndSerialOnEveryEngine) {
  const auto [want_replayed, want_pushed] = expected_counts();
  for (int round = 0; round < 2; ++round) {
    const std::uint64_t seed = test_seed(("auto" + std::to_string(round)).c_str());
    const Trace trace = make_trace(seed, kVars, 200 / kScale);
    std::vector<Iteration> its;
    for (int rep = 0; rep < kReps; ++rep) its.push_back(iteration(trace, rep));
    // The serial run, and every value it gives each variable.
    std::vector<std::uint64_t> expected(kVars, 0);
    SerialHistory history(kVars);
    for (const Iteration& it : its) {
      for (std::size_t i = 0; i < it.ops.size(); ++i) {
        apply_op(it.ops[i], it.index[i], expected);
        history.observe(it.ops[i].writes, expected);
      }
    }
    for (const auto& cfg : all_engine_configs()) {
      const Outcome pushed = run(trace, its, history, cfg, Mode::pushed, seed);
      const Outcome automatic = run(trace, its, history, cfg, Mode::automatic, seed);
      const Outcome profiled = run(trace, its, history, cfg, Mode::automatic_profiled, seed);
      ASSERT_EQ(pushed.vals, expected) << "pushed, engine " << cfg.label << ", seed=" << seed;
      ASSERT_EQ(automatic.vals, expected) << "automatic, engine " << cfg.label << ", seed=" << seed;
      ASSERT_EQ(profiled.vals, expected) << "automatic, profiler on, engine " << cfg.label << ", seed=" << seed;
      EXPECT_EQ(pushed.foreign_seen_bad, 0) << "pushed, engine " << cfg.label << ", seed=" << seed;
      EXPECT_EQ(automatic.foreign_seen_bad, 0) << "automatic, engine " << cfg.label << ", seed=" << seed;
      EXPECT_EQ(profiled.foreign_seen_bad, 0) << "automatic, profiler on, engine " << cfg.label;
      EXPECT_EQ(automatic.replayed, static_cast<std::uint64_t>(want_replayed)) << cfg.label << ", seed=" << seed;
      EXPECT_EQ(automatic.pushed, static_cast<std::uint64_t>(want_pushed)) << cfg.label << ", seed=" << seed;
      // With the profiler on the engine pushes a replay's ops one by one:
      // the iterations are pushed, as fast.
      EXPECT_EQ(profiled.replayed, 0U) << cfg.label;
      EXPECT_EQ(profiled.pushed, static_cast<std::uint64_t>(kReps)) << cfg.label;
    }
  }
}

TEST(AutoCapture, MatchingIterationsAreReplayedAChangedOneIsPushedAndRelearned) {
  Engine engine(threaded());
  Var a = engine.new_variable(), b = engine.new_variable(), c = engine.new_variable();
  Operator twice = engine.new_operator([] {}, {a}, {c});
  std::vector<int> log;  // each body appends its iteration, ordered by b
  AutoCapture loop(engine);
  auto step = [&](int i, const std::function<void()>& change) {
    loop.run([&] {
      engine.push_sync([i, &log] { log.push_back(i); }, Context::cpu(), {a}, {b}, {.name = "append"});
      engine.push_async([](RunContext, OnComplete done) { done(); }, Context::cpu(), {b}, {c});
      engine.push(twice, Context::cpu());
      change();
    });
  };
  auto none = [] {};
  step(0, none);
  EXPECT_EQ(loop.pushed(), 1U);
  EXPECT_EQ(loop.replayed(), 0U);
  EXPECT_EQ(loop.learned_size(), 3U);
  EXPECT_EQ(loop.last_mismatch(), "no graph learned yet");
  step(1, none);
  step(2, none);
  EXPECT_EQ(loop.replayed(), 2U);
  EXPECT_EQ(loop.pushed(), 1U);
  struct Case {
    std::function<void()> change;
    std::string why;
  };
  // Each case differs from the one before it in one respect only (the
  // one before it is what was learned).
  const auto noop = [] {};
  const auto other_noop = [] {};
  const OpAttrs x{.priority = 1, .name = "x"};
  const std::vector<Case> cases = {
      {[&] { engine.push_sync(noop, Context::cpu(), {}, {a}); }, "op 3 (push_sync): an op more"},
      {[&] { engine.push_sync(other_noop, Context::cpu(), {}, {a}); }, "op 3 (push_sync): another body type"},
      {[&] { engine.push_sync(other_noop, Context::cpu(), {}, {a}, {.priority = 1}); },
       "op 3 (push_sync): other attributes"},
      {[&] { engine.push_sync(other_noop, Context::cpu(), {}, {a}, x); }, "op 3 (push_sync 'x'): another name"},
      {[&] { engine.push_sync(other_noop, Context::cpu(), {}, {c}, x); },
       "op 3 (push_sync 'x'): other variables or access modes"},
      {[&] { engine.push_sync(other_noop, Context::cpu(), {a}, {c}, x); },
       "op 3 (push_sync 'x'): other variables or access modes"},
      {[&] { engine.push_sync(other_noop, Context::cpu(1), {a}, {c}, x); }, "op 3 (push_sync 'x'): another context"},
      {[&] { engine.push(twice, Context::cpu(), 3); }, "op 3 (push(Operator)): another operator"},
      {[&] { engine.push(twice, Context::cpu(), 4); }, "op 3 (push(Operator)): other attributes"},
  };
  std::uint64_t pushed = loop.pushed();
  std::uint64_t replayed = loop.replayed();
  int i = 3;
  for (const Case& k : cases) {
    step(i++, k.change);  // differs from what was learned: pushed, learned
    EXPECT_EQ(loop.pushed(), ++pushed) << k.why;
    EXPECT_NE(loop.last_mismatch().find(k.why), std::string::npos) << loop.last_mismatch() << " / " << k.why;
    step(i++, k.change);  // the same again: replayed
    EXPECT_EQ(loop.replayed(), ++replayed) << k.why;
  }
  step(i++, none);  // fewer ops than learned
  EXPECT_EQ(loop.last_mismatch(), "op 3: fewer ops than the learned graph has");
  EXPECT_EQ(loop.learned_size(), 3U);
  engine.wait_for_all();
  std::vector<int> want(static_cast<std::size_t>(i));
  for (int k = 0; k < i; ++k) want[static_cast<std::size_t>(k)] = k;
  EXPECT_EQ(log, want) << "each iteration's own body, in order";
  engine.delete_operator(twice);
}

TEST(AutoCapture, AnOpReorderedIsAMismatch) {
  Engine engine(threaded());
  Var a = engine.new_variable(), b = engine.new_variable();
  std::atomic<int> sum{0};
  AutoCapture loop(engine);
  auto body = [&sum](int x) { return [x, &sum] { sum += x; }; };
  loop.run([&] {
    engine.push_sync(body(1), Context::cpu(), {}, {a});
    engine.push_sync(body(2), Context::cpu(), {}, {b});
  });
  loop.run([&] {
    engine.push_sync(body(3), Context::cpu(), {}, {b});
    engine.push_sync(body(4), Context::cpu(), {}, {a});
  });
  EXPECT_EQ(loop.pushed(), 2U);
  EXPECT_EQ(loop.last_mismatch(), "op 0 (push_sync): other variables or access modes");
  engine.wait_for_all();
  EXPECT_EQ(sum.load(), 10);
}

TEST(AutoCapture, AFailingOpInAReplayedIterationBehavesAsPushed) {
  // The same iterations pushed and run through AutoCapture; iteration 2's
  // first op throws. Both: its write carries the error, the reader after it
  // is skipped (and passes it on), wait_for_var rethrows it once.
  struct Seen {
    std::vector<int> ran;
    std::string first_error;
    bool second_wait_throws = false;
    bool wait_all_throws = false;
    std::uint64_t replayed = 0;
  };
  auto go = [](bool automatic) {
    Seen seen;
    Engine engine(threaded());
    Var a = engine.new_variable(), b = engine.new_variable();
    AutoCapture loop(engine);
    auto iteration = [&](int i) {
      engine.push_sync(
          [i, &seen] {
            if (i == 2) throw std::runtime_error("iteration 2 failed");
            seen.ran.push_back(i * 10);
          },
          Context::cpu(), {}, {a}, {.name = "produce"});
      engine.push_sync([i, &seen] { seen.ran.push_back(i * 10 + 1); }, Context::cpu(), {a}, {b}, {.name = "consume"});
    };
    for (int i = 0; i < 3; ++i) {
      if (automatic) {
        loop.run([&] { iteration(i); });
      } else {
        iteration(i);
      }
    }
    try {
      engine.wait_for_var(b);
    } catch (const std::runtime_error& e) {
      seen.first_error = e.what();
    }
    try {
      engine.wait_for_var(b);
    } catch (...) {
      seen.second_wait_throws = true;
    }
    try {
      engine.wait_for_var(a);  // a's error (the same one) is rethrown by its own waiter
    } catch (...) {
    }
    try {
      engine.wait_for_all();
    } catch (...) {
      seen.wait_all_throws = true;
    }
    seen.replayed = loop.replayed();
    return seen;
  };
  const Seen pushed = go(false);
  const Seen automatic = go(true);
  EXPECT_EQ(automatic.replayed, 2U) << "iterations 1 and 2 repeat iteration 0";
  EXPECT_EQ(pushed.ran, (std::vector<int>{0, 1, 10, 11}));
  EXPECT_EQ(automatic.ran, pushed.ran);
  EXPECT_EQ(pushed.first_error, "iteration 2 failed");
  EXPECT_EQ(automatic.first_error, pushed.first_error);
  EXPECT_FALSE(pushed.second_wait_throws);
  EXPECT_FALSE(automatic.second_wait_throws);
  EXPECT_EQ(automatic.wait_all_throws, pushed.wait_all_throws);
}

TEST(AutoCapture, RefusesWhatCannotBeRecordedByNameAndPushesWhatCameBefore) {
  Engine engine(threaded());
  Var v = engine.new_variable();
  AutoCapture loop(engine);
  std::atomic<int> ran{0};
  auto before = [&] { engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {v}); };
  expect_error([&] { loop.run([&] { before(), engine.wait_for_var(v); }); }, Errc::invalid_argument,
               "wait_for_var inside ordo::AutoCapture::run");
  expect_error([&] { loop.run([&] { before(), engine.wait_for_all(); }); }, Errc::invalid_argument,
               "wait_for_all inside ordo::AutoCapture::run");
  expect_error([&] { loop.run([&] { before(), engine.delete_variable(v); }); }, Errc::invalid_argument,
               "delete_variable inside ordo::AutoCapture::run");
  expect_error([&] { loop.run([&] { before(), engine.post([] {}); }); }, Errc::invalid_argument,
               "post inside ordo::AutoCapture::run");
  expect_error([&] { loop.run([&] { before(), (void)engine.capture([] {}); }); }, Errc::invalid_argument,
               "Engine::capture inside ordo::AutoCapture::run");
  expect_error([&] { loop.run([&] { before(), loop.run([] {}); }); }, Errc::invalid_argument,
               "ordo::AutoCapture::run inside a run of the same AutoCapture");
  AutoCapture other(engine);
  expect_error([&] { loop.run([&] { before(), other.run([] {}); }); }, Errc::invalid_argument,
               "ordo::AutoCapture::run inside ordo::AutoCapture::run");
  expect_error([&] { (void)engine.capture([&] { other.run([] {}); }); }, Errc::invalid_argument,
               "ordo::AutoCapture::run inside Engine::capture");
  expect_error([&] { loop.run([&] { before(), engine.push_sync([] {}, Context::gpu(0), {}, {v}, {.name = "k"}); }); },
               Errc::invalid_argument,
               "push_sync 'k' inside ordo::AutoCapture::run: only CPU contexts and ordo::gpu::Runtime's GPU ops");
  Graph g = engine.capture([&] { engine.push_sync([] {}, Context::cpu(), {}, {v}); });
  expect_error([&] { loop.run([&] { before(), engine.replay(g); }); }, Errc::invalid_argument,
               "replay inside ordo::AutoCapture::run");
  auto lease = [&]() -> Task<void> { co_await engine.push(reads(), writes(v)); };
  expect_error([&] { loop.run([&] { before(), sync_wait(lease()); }); }, Errc::invalid_argument,
               "a coroutine push (ordo::push, co_await engine.push or ordo::wait_for) inside ordo::AutoCapture::run");
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 10) << "the op recorded before each refused call is pushed, as the program pushed it";
  EXPECT_EQ(loop.replayed(), 0U);
  // The thread pushes normally again.
  engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {v});
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 11);
}

TEST(AutoCapture, AnExceptionOutOfRunPushesWhatWasRecordedAndKeepsTheLearnedGraph) {
  Engine engine(threaded());
  Var v = engine.new_variable();
  AutoCapture loop(engine);
  std::vector<int> log;
  auto iteration = [&](int i) { engine.push_sync([i, &log] { log.push_back(i); }, Context::cpu(), {}, {v}); };
  loop.run([&] { iteration(0); });
  EXPECT_THROW(loop.run([&] {
    iteration(1);
    throw std::logic_error("user code");
  }),
               std::logic_error);
  EXPECT_EQ(loop.learned_size(), 1U);
  loop.run([&] { iteration(2); });
  EXPECT_EQ(loop.replayed(), 1U);
  engine.wait_for_all();
  EXPECT_EQ(log, (std::vector<int>{0, 1, 2}));
}

TEST(AutoCapture, PushesOnAnotherEngineAreNotRecorded) {
  Engine engine(threaded()), other(threaded());
  Var v = engine.new_variable(), w = other.new_variable();
  AutoCapture loop(engine);
  Gate gate;
  loop.run([&] {
    other.push_sync([&] { gate.open(); }, Context::cpu(), {}, {w});
    gate.wait();  // ran already: pushed on `other` at once
    engine.push_sync([] {}, Context::cpu(), {}, {v});
  });
  EXPECT_EQ(loop.learned_size(), 1U);
  engine.wait_for_all();
  other.wait_for_all();
}

TEST(AutoCapture, DestroyedWithIterationsInFlight) {
  // Run under ASan: the bodies of the iterations still running are
  // destroyed when their ops are done, after the AutoCapture.
  Engine engine(threaded());
  Var v = engine.new_variable();
  Gate gate;
  auto counter = std::make_shared<int>(0);
  {
    AutoCapture loop(engine);
    for (int i = 0; i < 3; ++i) {
      loop.run([&] {
        engine.push_sync([&gate] { gate.wait(); }, Context::cpu(), {}, {v});
        engine.push_sync([counter] { ++*counter; }, Context::cpu(), {v}, {});
      });
    }
    EXPECT_EQ(loop.replayed(), 2U);
  }
  EXPECT_GT(counter.use_count(), 1) << "bodies held until their ops are done";
  gate.open();
  engine.wait_for_all();
  EXPECT_EQ(*counter, 3);
}

}  // namespace
}  // namespace ordo::test
