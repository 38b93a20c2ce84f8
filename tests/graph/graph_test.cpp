// Captured graphs: what a capture records and refuses, what a replay
// promises (order, arguments, errors), and the lifetimes of graphs,
// variables and operators around replays.
#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <thread>

#include "core/test_util.hpp"
#include "graph/graph_test_util.hpp"
#include "ordo/coro.hpp"
#include "ordo/graph.hpp"

namespace ordo::test {
namespace {


TEST(GraphCapture, RecordsWithoutRunningAndResolvesEdges) {
  Engine engine(threaded());
  Var a = engine.new_variable(), b = engine.new_variable(), c = engine.new_variable();
  std::atomic<int> ran{0};  // op 4 has no variables: it runs beside the others
  Graph g = engine.capture([&] {
    engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {a});         // 0 writes a
    engine.push_sync([&] { ++ran; }, Context::cpu(), {a}, {b});        // 1 after 0 (a)
    engine.push_sync([&] { ++ran; }, Context::cpu(), {a}, {c});        // 2 after 0 (a)
    engine.push_sync([&] { ++ran; }, Context::cpu(), {b, c}, {a, a});  // 3 after 1, 2 (b, c; a's readers)
    engine.push_async([&](RunContext, OnComplete done) { ++ran; done(); }, Context::cpu(), {}, {});  // 4 alone
  });
  EXPECT_EQ(ran.load(), 0) << "a capture must not run the bodies it records";
  EXPECT_EQ(engine.in_flight(), 0U);
  EXPECT_EQ(g.size(), 5U);
  EXPECT_EQ(g.edges(), 5U);  // 0->1, 0->2, 1->3, 2->3 (b, c and a's readers: one edge each pair)
  engine.replay(g);
  engine.replay(g);
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 10);
}

TEST(GraphCapture, RefusesWhatCannotBeRecordedByName) {
  Engine engine(threaded());
  Var v = engine.new_variable();
  expect_error([&] { (void)engine.capture([&] { engine.wait_for_var(v); }); }, Errc::invalid_argument,
               "wait_for_var inside Engine::capture");
  expect_error([&] { (void)engine.capture([&] { engine.wait_for_all(); }); }, Errc::invalid_argument,
               "wait_for_all inside Engine::capture");
  expect_error([&] { (void)engine.capture([&] { engine.delete_variable(v); }); }, Errc::invalid_argument,
               "delete_variable inside Engine::capture");
  expect_error([&] { (void)engine.capture([&] { engine.post([] {}); }); }, Errc::invalid_argument,
               "post inside Engine::capture");
  expect_error([&] { (void)engine.capture([&] { (void)engine.capture([] {}); }); }, Errc::invalid_argument,
               "captures do not nest");
  expect_error(
      [&] {
        (void)engine.capture([&] { engine.push_sync([] {}, Context::gpu(0), {}, {v}, {.name = "kernel"}); });
      },
      Errc::invalid_argument,
      "push_sync 'kernel' inside Engine::capture: only CPU contexts and ordo::gpu::Runtime's GPU ops can be captured");
  Graph g = engine.capture([&] { engine.push_sync([] {}, Context::cpu(), {}, {v}); });
  expect_error([&] { (void)engine.capture([&] { engine.replay(g); }); }, Errc::invalid_argument,
               "replay inside Engine::capture");
  // Coroutine pushes, each form: refused at the push, the coroutine gets the error.
  auto lease = [&]() -> Task<void> { co_await engine.push(reads(), writes(v)); };
  auto function = [&]() -> Task<void> { co_await engine.push(reads(), writes(v), [] { return 1; }); };
  auto wait = [&]() -> Task<void> { co_await engine.wait_for(v); };
  expect_error([&] { (void)engine.capture([&] { sync_wait(lease()); }); }, Errc::invalid_argument,
               "a coroutine push");
  expect_error([&] { (void)engine.capture([&] { sync_wait(function()); }); }, Errc::invalid_argument,
               "a coroutine push");
  expect_error([&] { (void)engine.capture([&] { sync_wait(wait()); }); }, Errc::invalid_argument,
               "a coroutine push");
  // After every refusal the thread pushes normally again.
  std::atomic<int> ran{0};
  engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {v});
  engine.wait_for_var(v);
  EXPECT_EQ(ran.load(), 1);
}

TEST(GraphCapture, PushesToAnotherEngineRunAsUsual) {
  Engine engine(threaded()), other(threaded());
  Var v = engine.new_variable(), w = other.new_variable();
  std::atomic<int> ran{0};
  Graph g = engine.capture([&] {
    other.push_sync([&] { ran += 10; }, Context::cpu(), {}, {w});
    engine.push_sync([&] { ran += 1; }, Context::cpu(), {}, {v});
  });
  other.wait_for_var(w);
  EXPECT_EQ(ran.load(), 10);
  EXPECT_EQ(g.size(), 1U);
  engine.replay(g);
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 11);
}

TEST(GraphReplay, OrderedAgainstPushesBeforeAndAfterFromAnyThread) {
  for (EngineKind kind : {EngineKind::naive, EngineKind::pooled, EngineKind::per_device}) {
    Engine engine(Options{.kind = kind, .cpu_workers = 2});
    Var log_var = engine.new_variable();
    std::vector<int> log;
    Graph g = engine.capture([&] {
      engine.push_sync([&] { log.push_back(1); }, Context::cpu(), {}, {log_var});
      engine.push_sync([&] { log.push_back(2); }, Context::cpu(), {}, {log_var});
    });
    engine.push_sync([&] { log.push_back(0); }, Context::cpu(), {}, {log_var});
    engine.replay(g);
    engine.push_sync([&] { log.push_back(3); }, Context::cpu(), {}, {log_var});
    std::thread t([&] { engine.replay(g); });  // after the push above: joined before the next one
    t.join();
    engine.push_sync([&] { log.push_back(4); }, Context::cpu(), {}, {log_var});
    engine.wait_for_all();
    EXPECT_EQ(log, (std::vector<int>{0, 1, 2, 3, 1, 2, 4})) << to_string(kind);
  }
}

TEST(GraphReplay, ArgumentReachesEveryBodyOfItsReplay) {
  Engine engine(threaded());
  Var v = engine.new_variable();
  std::vector<int> seen;
  Graph g = engine.capture([&] {
    engine.push_sync([&] { seen.push_back(replay_arg<int>()); }, Context::cpu(), {}, {v});
    engine.push_async(
        [&](RunContext, OnComplete done) {
          seen.push_back(replay_arg<int>() * 100);
          done();
        },
        Context::cpu(), {}, {v});
  });
  for (int i = 1; i <= 3; ++i) engine.replay(g, i);
  engine.wait_for_all();
  EXPECT_EQ(seen, (std::vector<int>{1, 100, 2, 200, 3, 300}));
  // Misuse: no argument, the wrong type, outside a replayed body.
  std::string error;
  Graph probe = engine.capture([&] {
    engine.push_sync(
        [&] {
          try {
            (void)replay_arg<double>();
          } catch (const Error& e) {
            error = e.what();
          }
        },
        Context::cpu(), {}, {v});
  });
  engine.replay(probe);
  engine.wait_for_all();
  EXPECT_NE(error.find("given no argument"), std::string::npos) << error;
  engine.replay(probe, 7);
  engine.wait_for_all();
  EXPECT_NE(error.find("the replay's argument is a"), std::string::npos) << error;
  expect_error([] { (void)replay_arg<int>(); }, Errc::invalid_argument, "outside the body of a replayed op");
}

TEST(GraphReplay, FailingOpBehavesAsWhenPushed) {
  // The same sequence pushed, then replayed: the same variables carry the
  // error, the same ops are skipped.
  for (bool replayed : {false, true}) {
    Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2, .on_unobserved_error = [](auto&) {}});
    Var x = engine.new_variable(), y = engine.new_variable(), z = engine.new_variable();
    std::atomic<int> y_ran{0}, z_ran{0};
    auto sequence = [&] {
      engine.push_sync([] { throw std::runtime_error("boom"); }, Context::cpu(), {}, {x}, {.name = "fails"});
      engine.push_sync([&] { ++y_ran; }, Context::cpu(), {x}, {y});
      engine.push_sync([&] { ++z_ran; }, Context::cpu(), {}, {z});
    };
    if (replayed) {
      Graph g = engine.capture(sequence);
      engine.replay(g);
    } else {
      sequence();
    }
    EXPECT_THROW(engine.wait_for_var(x), std::runtime_error);
    EXPECT_THROW(engine.wait_for_var(y), std::runtime_error);
    EXPECT_NO_THROW(engine.wait_for_var(z));
    EXPECT_EQ(y_ran.load(), 0);
    EXPECT_EQ(z_ran.load(), 1);
  }
}

// A recorded op waits for its recorded predecessors and for the pushes
// before the replay on its own variables, nothing else; and a variable is
// free for later pushes once the replay's last op on it has finished, while
// other variables of the graph are still held.
TEST(GraphReplay, RecordedOpWaitsOnlyForItsOwnVariables) {
  for (EngineKind kind : {EngineKind::pooled, EngineKind::per_device}) {
    Engine engine(Options{.kind = kind, .cpu_workers = 2});
    Var x = engine.new_variable(), y = engine.new_variable(), z = engine.new_variable();
    std::atomic<int> a_ran{0};
    Graph g = engine.capture([&] {
      engine.push_sync([&] { ++a_ran; }, Context::cpu(), {}, {x}, {.name = "A"});  // entry on x only
      engine.push_sync([] {}, Context::cpu(), {}, {y}, {.name = "B"});
      engine.push_sync([] {}, Context::cpu(), {y}, {z}, {.name = "C"});           // after B
    });
    Gate gate;
    engine.push_sync([&] { ASSERT_TRUE(gate.wait()); }, Context::cpu(), {}, {x}, {.name = "holds x"});
    engine.replay(g);
    Counter after;  // pushed after the replay on y: needs only y's hold to end
    engine.push_sync([&] { after.arrive(); }, Context::cpu(), {y}, {});
    EXPECT_TRUE(after.wait_for(1, std::chrono::seconds(30)))
        << "a push after the replay on y waited for x, which only A of the graph touches";
    EXPECT_EQ(a_ran.load(), 0) << "A ran before the op pushed before the replay on x";
    gate.open();
    engine.wait_for_all();
    EXPECT_EQ(a_ran.load(), 1);
  }
}

// The variables after a replay as after the same pushes: their versions
// (one per write), errors carried in and cleared by a write that always
// runs, and the ops skipped.
TEST(GraphReplay, VersionsAndErrorsAsWhenPushed) {
  struct Seen {
    std::uint64_t vx, vy, vz;
    bool x_throws, y_throws, z_throws;
    int ran;
  };
  auto once = [](bool replayed) {
    Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2, .on_unobserved_error = [](auto&) {}});
    Var x = engine.new_variable(), y = engine.new_variable(), z = engine.new_variable();
    std::atomic<int> ran{0};
    auto sequence = [&] {
      engine.push_sync([&] { ++ran; }, Context::cpu(), {x}, {y}, {.name = "skipped: x carries an error"});
      engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {y}, {.name = "skipped: y carries it now"});
      engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {x}, {.always_run = true});  // clears x
      engine.push_sync([&] { ++ran; }, Context::cpu(), {x}, {z});
      engine.push_sync([&] { ++ran; }, Context::cpu(), {x, z}, {z});
    };
    engine.push_sync([] { throw std::runtime_error("before"); }, Context::cpu(), {}, {x}, {.name = "fails"});
    if (replayed) {
      Graph g = engine.capture(sequence);
      engine.replay(g);
      engine.replay(g);
    } else {
      sequence();
      sequence();
    }
    auto throws = [&](Var v) {  // a wait takes the error off the variable
      try {
        engine.wait_for_var(v);
        return false;
      } catch (const std::runtime_error&) {
        return true;
      }
    };
    const bool tx = throws(x), ty = throws(y), tz = throws(z);
    return Seen{engine.var_version(x), engine.var_version(y), engine.var_version(z), tx, ty, tz, ran.load()};
  };
  const Seen pushed = once(false), replayed = once(true);
  EXPECT_EQ(replayed.vx, pushed.vx);
  EXPECT_EQ(replayed.vy, pushed.vy);
  EXPECT_EQ(replayed.vz, pushed.vz);
  EXPECT_EQ(pushed.vx, 3U);  // the failed write and one per sequence
  EXPECT_EQ(pushed.vy, 4U);  // skipped writes count too
  EXPECT_EQ(replayed.x_throws, pushed.x_throws);
  EXPECT_EQ(replayed.y_throws, pushed.y_throws);
  EXPECT_EQ(replayed.z_throws, pushed.z_throws);
  EXPECT_FALSE(pushed.x_throws);
  EXPECT_TRUE(pushed.y_throws);
  EXPECT_EQ(replayed.ran, pushed.ran);
  EXPECT_EQ(pushed.ran, 6);  // the first two are skipped both times: y keeps the error
}

// An async body's failure, passed to its OnComplete, with no recorded op
// after it: the awaiter gets it, once, whether the replay pushes its ops
// (profiler on) or not.
TEST(GraphReplay, AsyncFailureReachesTheAwaiterEitherWay) {
  for (bool profiled : {false, true}) {
    Options options{.kind = EngineKind::pooled, .cpu_workers = 2};
    options.profile.enabled = profiled;
    Engine engine(options);
    Var x = engine.new_variable();
    Graph g = engine.capture([&] {
      engine.push_async([](RunContext, OnComplete done) { done(std::make_exception_ptr(std::runtime_error("async"))); },
                        Context::cpu(), {}, {x}, {.name = "fails later"});
    });
    auto step = [&]() -> Task<void> { co_await replay(engine, g); };
    EXPECT_THROW(sync_wait(step()), std::runtime_error) << (profiled ? "profiled" : "not profiled");
    EXPECT_EQ(engine.pending_errors(), 0U) << "observed by the awaiter";
    EXPECT_THROW(engine.wait_for_var(x), std::runtime_error) << "the variable carries it too";
  }
}

TEST(GraphReplay, AwaiterGetsTheErrorOnce) {
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  Var x = engine.new_variable(), y = engine.new_variable();
  std::atomic<int> y_ran{0};
  Graph g = engine.capture([&] {
    engine.push_sync([] { throw std::runtime_error("boom"); }, Context::cpu(), {}, {x}, {.name = "fails"});
    engine.push_sync([&] { ++y_ran; }, Context::cpu(), {x}, {y});
  });
  auto step = [&]() -> Task<void> { co_await replay(engine, g); };
  EXPECT_THROW(sync_wait(step()), std::runtime_error);
  EXPECT_EQ(y_ran.load(), 0);
  // Observed by the awaiter: no waiter gets it a second time from wait_for_all.
  EXPECT_EQ(engine.pending_errors(), 0U);
  EXPECT_NO_THROW(engine.wait_for_all());
  // A replay that succeeds resumes its awaiter with no error, after its ops.
  Graph ok = engine.capture([&] { engine.push_sync([&] { ++y_ran; }, Context::cpu(), {}, {y}); });
  auto fine = [&]() -> Task<int> {
    co_await replay(engine, ok, 5);
    co_return y_ran.load();
  };
  EXPECT_EQ(sync_wait(fine()), 1);
}

// A replay runs the ops a finished op makes ready on the same worker, one
// after another in one call (no op record each): each is still its own op,
// as when pushed. A wait inside a body names that body's op; a failure
// skips what follows and reaches the awaiter once; every op is counted.
TEST(GraphReplay, OpsRunOneAfterAnotherAreEachTheirOwn) {
  for (EngineKind kind : {EngineKind::pooled, EngineKind::per_device}) {
    for (bool replayed : {false, true}) {
      Engine engine(Options{.kind = kind, .cpu_workers = 2, .on_unobserved_error = [](auto&) {}});
      Var x = engine.new_variable(), y = engine.new_variable();
      std::string refused;  // guarded by x
      std::atomic<int> ran{0};
      auto chain = [&] {
        engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {x}, {.name = "first"});
        engine.push_sync(
            [&] {
              ++ran;
              try {
                engine.wait_for_var(y);
              } catch (const Error& e) {
                refused = e.what();
              }
            },
            Context::cpu(), {}, {x}, {.name = "second"});
        engine.push_sync([&] { ++ran; throw std::runtime_error("third failed"); }, Context::cpu(), {}, {x},
                         {.name = "third"});
        engine.push_sync([&] { ++ran; }, Context::cpu(), {x}, {y}, {.name = "fourth"});
      };
      const std::string label = std::string(to_string(kind)) + (replayed ? " replayed" : " pushed");
      auto awaited = [&]() -> Task<void> {
        if (replayed) {
          Graph g = engine.capture(chain);
          co_await replay(engine, g);
        } else {
          chain();
          co_await wait_for(engine, y);
        }
      };
      EXPECT_THROW(sync_wait(awaited()), std::runtime_error) << label;
      engine.wait_for_all();
      EXPECT_EQ(ran.load(), 3) << label;  // the fourth skipped
      EXPECT_NE(refused.find("'second'"), std::string::npos) << label << ": " << refused;
      const EngineStats stats = engine.stats();
      EXPECT_EQ(stats.ops_in_flight, 0U) << label;
      EXPECT_EQ(stats.ops_completed, stats.ops_pushed) << label;
    }
  }
}

TEST(GraphReplay, DeletedVariableOrOperatorFailsTheReplayByName) {
  Engine engine(threaded());
  Var v = engine.new_variable(), w = engine.new_variable();
  std::atomic<int> ran{0};
  Operator op = engine.new_operator([&] { ++ran; }, {}, {w});
  Graph g = engine.capture([&] {
    engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {v}, {.name = "first"});
    engine.push(op, Context::cpu());
  });
  Graph on_v = engine.capture([&] {
    engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {w}, {.name = "other"});
    engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {v}, {.name = "first"});
  });
  engine.replay(g);
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 2);
  engine.delete_operator(op);
  expect_error([&] { engine.replay(g); }, Errc::deleted_operator, "recorded op 1");
  engine.delete_variable(v);
  expect_error([&] { engine.replay(on_v); }, Errc::deleted_var, "recorded op 1 'first' was deleted");
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 2) << "a replay refused for a deleted variable must push nothing";
}

TEST(GraphReplay, GraphDestroyedWithReplaysInFlight) {
  Engine engine(threaded());
  Var v = engine.new_variable();
  Gate gate;
  std::atomic<int> ran{0};
  {
    // The body holds a string: use after free would show under ASan.
    std::string word = "alive";
    Graph g = engine.capture([&engine, &gate, &ran, v, word] {
      engine.push_sync([&gate, &ran, word] {
        EXPECT_TRUE(gate.wait());
        if (word == "alive") ++ran;
      }, Context::cpu(), {}, {v});
    });
    engine.replay(g);
    engine.replay(g);
  }  // the graph goes first
  gate.open();
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 2);
}

TEST(GraphReplay, GraphOutlivesItsEngine) {
  Graph g;
  std::atomic<int> ran{0};
  {
    Engine engine(threaded());
    Var v = engine.new_variable();
    Operator op = engine.new_operator([&] { ++ran; }, {}, {v});
    g = engine.capture([&] {
      engine.push_sync([&, word = std::string("alive")] { ran += word == "alive" ? 1 : 0; }, Context::cpu(), {}, {v});
      engine.push(op, Context::cpu());
    });
    engine.replay(g);
  }  // drained: both ops ran; the graph keeps its bodies, and no pointer into the engine is followed again
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(g.size(), 2U);
}

/// Whether an op pushed on `reads`/`writes` (inline_ok when `direct`) runs
/// within a bound: a graph's kept access must not hold it up.
bool runs_soon(Engine& engine, std::vector<Var> reads, std::vector<Var> writes, bool direct = false) {
  auto gate = std::make_shared<Gate>();
  engine.push_sync([gate] { gate->open(); }, Context::cpu(), reads, writes, {.inline_ok = direct});
  return gate->wait(std::chrono::seconds(20));
}

// Between replays a graph keeps the accesses nothing else waits for, and
// its next replay takes them over without the variables' queues; any push
// on one takes it back first. Each way a push can come (queued, direct,
// a wait, a delete, another graph's replay) and each way the graph can go
// (destroyed, a failed replay) must leave the variable as a release would.
TEST(GraphReplay, KeptAccessesAreTakenBackByWhateverComesNext) {
  for (const EngineKind kind : {EngineKind::naive, EngineKind::pooled, EngineKind::per_device}) {
    SCOPED_TRACE(static_cast<int>(kind));
    Engine engine(Options{.kind = kind, .cpu_workers = 2, .on_unobserved_error = [](auto&) {}});
    Var w = engine.new_variable(), r = engine.new_variable(), e = engine.new_variable();
    std::atomic<int> ran{0};
    Graph g = engine.capture([&] {
      engine.push_sync([&] { ++ran; }, Context::cpu(), {r}, {w}, {.name = "writes w"});
      engine.push_sync([&] { ++ran; }, Context::cpu(), {r}, {}, {.name = "reads r"});
    });
    Graph fails = engine.capture([&] {
      engine.push_sync([] { throw std::runtime_error("kept"); }, Context::cpu(), {}, {e}, {.name = "fails"});
    });
    for (int i = 0; i < 3; ++i) engine.replay(g);
    engine.wait_for_all();
    engine.replay(fails);
    EXPECT_EQ(ran.load(), 6);
    EXPECT_EQ(engine.var_version(w), 3U) << "a kept write is counted when kept";
    EXPECT_EQ(engine.var_version(r), 0U);
    // A write on a variable the graph only reads (kept as a read), a direct
    // push on one it writes, and a wait on the one whose write failed.
    EXPECT_TRUE(runs_soon(engine, {}, {r}));
    engine.replay(g);
    EXPECT_TRUE(runs_soon(engine, {}, {w}, /*direct=*/true));
    EXPECT_THROW(engine.wait_for_var(e), std::runtime_error);
    engine.replay(fails);
    engine.replay(fails);  // takes e over with the error the first one left
    EXPECT_THROW(engine.wait_for_var(e), std::runtime_error);
    // Another graph on the same variable takes it over from this one, and back.
    Graph other = engine.capture([&] { engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {w}); });
    engine.replay(g);
    engine.replay(other);
    engine.replay(g);
    engine.wait_for_all();
    EXPECT_EQ(ran.load(), 6 + 2 + 2 + 1 + 2);
    EXPECT_EQ(engine.var_version(w), 3U + 1 + 1 + 1 + 1 + 1);
    // A replay refused for a deleted variable gives back what it took
    // over (w stays usable) and names the op on the deleted one.
    engine.replay(g);
    engine.wait_for_all();
    engine.delete_variable(r);
    expect_error([&] { engine.replay(g); }, Errc::deleted_var, "recorded op 0 'writes w'");
    EXPECT_TRUE(runs_soon(engine, {w}, {}));
    EXPECT_TRUE(runs_soon(engine, {}, {w}, /*direct=*/true));
    // A graph destroyed with its accesses kept ends them.
    engine.replay(other);
    engine.wait_for_all();
    other = Graph();
    EXPECT_TRUE(runs_soon(engine, {}, {w}, /*direct=*/true));
    EXPECT_EQ(ran.load(), 6 + 2 + 2 + 1 + 2 + 2 + 1);
  }
}

// Two graphs on shared variables replayed in a random mix with pushes on
// those variables (queued and direct, reads and writes), replays of each
// graph often overlapping (kept accesses taken over, taken back, kept by
// the other graph, read accesses kept beside reads): one pushing thread,
// so the values must match a serial run bit for bit. Each op folds its
// reads, its index and the replay's argument into what it writes, in an
// order that does not commute.
TEST(GraphReplay, KeptAccessesInARandomMixMatchASerialRun) {
  constexpr int kMixVars = 6;
  struct MixOp {
    std::vector<int> reads, writes;
    std::uint64_t salt;
  };
  auto apply = [](const MixOp& op, std::uint64_t arg, std::vector<std::uint64_t>& vals) {
    std::uint64_t in = op.salt + arg;
    for (int r : op.reads) in = in * 31 + vals[static_cast<std::size_t>(r)];
    for (int w : op.writes) vals[static_cast<std::size_t>(w)] = vals[static_cast<std::size_t>(w)] * 1000003 + in;
  };
  for (int round = 0; round < 2; ++round) {
    const std::uint64_t seed = test_seed(("kept_mix" + std::to_string(round)).c_str());
    std::mt19937_64 rng(seed);
    // Graph 1 writes none of vars 0 and 1: it only reads them (its kept
    // accesses there are reads, which overlapping replays share).
    auto random_op = [&](int first_written = 0) {
      MixOp op{{}, {}, rng()};
      std::vector<int> order(kMixVars);
      for (int i = 0; i < kMixVars; ++i) order[static_cast<std::size_t>(i)] = i;
      std::shuffle(order.begin(), order.end(), rng);
      const std::size_t reads = rng() % 3;
      const std::size_t writes = reads == 0 ? 1 : rng() % 2;
      for (int v : order) {
        if (op.reads.size() < reads) {
          op.reads.push_back(v);
        } else if (op.writes.size() < writes && v >= first_written) {
          op.writes.push_back(v);
        }
      }
      return op;
    };
    std::vector<MixOp> graph_ops[2];
    for (int i = 0; i < 4; ++i) graph_ops[0].push_back(random_op());
    graph_ops[1].push_back(MixOp{{0, 1}, {}, rng()});
    for (int i = 0; i < 3; ++i) graph_ops[1].push_back(random_op(2));
    // The program: -1 - g replays graph g (its argument the step), else a
    // push of pushes[k]; a graph is often replayed a few times in a row.
    std::vector<MixOp> pushes;
    std::vector<int> steps;
    while (steps.size() < 300 / kScale) {
      if (rng() % 3 != 0) {
        const int g = static_cast<int>(rng() % 2);
        for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n) steps.push_back(-1 - g);
      } else {
        steps.push_back(static_cast<int>(pushes.size()));
        pushes.push_back(random_op());
      }
    }
    std::vector<std::uint64_t> expected(kMixVars, 1);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (steps[i] < 0) {
        for (const MixOp& op : graph_ops[-1 - steps[i]]) apply(op, i, expected);
      } else {
        apply(pushes[static_cast<std::size_t>(steps[i])], 0, expected);
      }
    }
    for (const auto& cfg : all_engine_configs()) {
      Engine engine(cfg.options);
      std::vector<Var> vars;
      for (int i = 0; i < kMixVars; ++i) vars.push_back(engine.new_variable());
      std::vector<std::uint64_t> vals(kMixVars, 1);
      auto push = [&](const MixOp& op, bool in_graph, bool direct) {
        std::vector<Var> reads, writes;
        for (int r : op.reads) reads.push_back(vars[static_cast<std::size_t>(r)]);
        for (int w : op.writes) writes.push_back(vars[static_cast<std::size_t>(w)]);
        engine.push_sync([&apply, &vals, &op, in_graph] {
          apply(op, in_graph ? replay_arg<std::uint64_t>() : 0, vals);
        }, Context::cpu(), reads, writes, {.inline_ok = direct});
      };
      Graph graphs[2];
      for (int g = 0; g < 2; ++g) {
        graphs[g] = engine.capture([&] {
          for (const MixOp& op : graph_ops[g]) push(op, true, false);
        });
      }
      for (std::size_t i = 0; i < steps.size(); ++i) {
        if (steps[i] < 0) {
          engine.replay(graphs[-1 - steps[i]], std::uint64_t{i});
        } else {
          push(pushes[static_cast<std::size_t>(steps[i])], false, i % 2 == 0);
        }
      }
      // Bounded: an access left kept by mistake holds this write up forever.
      ASSERT_TRUE(runs_soon(engine, {}, vars)) << "engine " << cfg.label << ", seed=" << seed;
      engine.wait_for_all();
      EXPECT_EQ(vals, expected) << "engine " << cfg.label << ", seed=" << seed;
    }
  }
}

TEST(GraphReplay, AReplayTakesKeptAccessesInTheStepOfItsHolders) {
  // A replay that took some kept accesses over and pushed holders for the
  // others in a later step would take its place at two moments: a push made
  // between them, after it on a taken variable and before it on another,
  // would wait for it while it waits for that push. The other thread takes
  // `a` back (so a replay finds only `b` kept) and pushes on both.
  Engine engine(threaded());
  Var a = engine.new_variable(), b = engine.new_variable();
  std::atomic<int> ran{0};
  Graph g = engine.capture([&] { engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {a, b}); });
  std::atomic<bool> stop{false};
  std::thread other([&] {
    for (std::uint64_t i = 0; !stop.load(); ++i) {
      if (i % 2 == 0) {
        engine.push_sync([] {}, Context::cpu(), {}, {a});
      } else {
        engine.push_sync([] {}, Context::cpu(), {b}, {a});
      }
    }
  });
  bool stuck = false;
  for (int round = 0; round < 20000 / kScale && !stuck; ++round) {
    engine.replay(g);
    // The next replay once this one's op has run: it finds what this one
    // kept. Bounded: stuck, they wait for each other (and the engine's
    // destructor waits for them too: the test then times out).
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (ran.load() <= round && !stuck) {
      stuck = std::chrono::steady_clock::now() > limit;
      std::this_thread::yield();
    }
  }
  stop.store(true);
  other.join();
  ASSERT_FALSE(stuck) << "a replay and a push wait for each other";
  engine.wait_for_all();
}

TEST(GraphReplay, ConcurrentReplaysOfOneGraphKeepEachThreadsOrder) {
  const std::uint64_t seed = test_seed("concurrent_replays");
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 4});
  Var v = engine.new_variable();
  std::vector<int> log;  // guarded by v
  Graph g = engine.capture([&] {
    engine.push_sync([&] { log.push_back(replay_arg<int>()); }, Context::cpu(), {}, {v});
    engine.push_sync([&] { log.push_back(replay_arg<int>()); }, Context::cpu(), {}, {v});
  });
  const int per_thread = 200 / kScale;
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(seed) + static_cast<unsigned>(t));
      for (int i = 0; i < per_thread; ++i) {
        engine.replay(g, t * 100000 + i);
        if (rng() % 4 == 0) std::this_thread::yield();
      }
    });
  }
  for (auto& t : threads) t.join();
  engine.wait_for_all();
  // Other threads' replays interleave anywhere, but each thread's own ops
  // come in the order it pushed them: its replays in order, each one's two ops in order.
  ASSERT_EQ(log.size(), static_cast<std::size_t>(3 * per_thread * 2));
  std::map<int, std::vector<int>> by_thread;
  for (int x : log) by_thread[x / 100000].push_back(x % 100000);
  for (int t = 0; t < 3; ++t) {
    std::vector<int> want;
    for (int i = 0; i < per_thread; ++i) want.insert(want.end(), {i, i});
    EXPECT_EQ(by_thread[t], want) << "thread " << t << " seed=" << seed;
  }
}

TEST(GraphReplay, AwaitedOnEveryEngineWithAsyncOpsAndFromInsideAnOp) {
  for (EngineKind kind : {EngineKind::naive, EngineKind::pooled, EngineKind::per_device}) {
    ThreadExecutor completer;  // completes the async ops from another thread; outlives the engine
    Engine engine(Options{.kind = kind, .cpu_workers = 2});
    Var a = engine.new_variable(), b = engine.new_variable();
    std::vector<int> log;  // guarded by a
    Graph g = engine.capture([&] {
      engine.push_async(
          [&](RunContext, OnComplete done) {
            log.push_back(replay_arg<int>());
            completer.post([done] { done(); });
          },
          Context::cpu(), {}, {a});
      engine.push_sync([&] { log.push_back(-replay_arg<int>()); }, Context::cpu(), {b}, {a});
    });
    auto twice = [&]() -> Task<void> {
      co_await replay(engine, g, 1);
      EXPECT_EQ(log.size(), 2U) << to_string(kind);  // resumed after both ops of the replay
      co_await replay(engine, g, 2);
    };
    sync_wait(twice());
    // A replay pushed from inside an op body, like a push from there.
    engine.push_sync([&] { engine.replay(g, 3); }, Context::cpu(), {}, {b});
    engine.wait_for_all();
    EXPECT_EQ(log, (std::vector<int>{1, -1, 2, -2, 3, -3})) << to_string(kind);
  }
}

TEST(GraphReplay, GraphDestroyedWhileAPushTakesItsKeptAccessBack) {
  // A graph's last replay ends on a worker, keeps its variables' accesses
  // and drops the graph (its last copy is gone), while this thread pushes
  // on the variables, which takes the accesses back: the graph's end must
  // find them gone, not end them again (not read a keeper the push has
  // cleared).
  Engine engine(threaded());
  Var a = engine.new_variable(), b = engine.new_variable(), c = engine.new_variable();
  std::atomic<int> ran{0};
  auto step = [&] {
    engine.push_sync([&] { ++ran; }, Context::cpu(), {a}, {b});
    engine.push_sync([&] { ++ran; }, Context::cpu(), {b}, {c});
    engine.push_sync([&] { ++ran; }, Context::cpu(), {a}, {c});
  };
  const int rounds = 4000;
  for (int round = 0; round < rounds; ++round) {
    {
      Graph g = engine.capture(step);
      engine.replay(g);
    }
    step();
  }
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), rounds * 6);
}

TEST(GraphReplay, EmptyOrForeignGraphIsRefused) {
  Engine engine(threaded()), other(threaded());
  expect_error([&] { engine.replay(Graph{}); }, Errc::invalid_argument, "empty ordo::Graph");
  Var v = other.new_variable();
  Graph g = other.capture([&] { other.push_sync([] {}, Context::cpu(), {}, {v}); });
  expect_error([&] { engine.replay(g); }, Errc::invalid_argument, "captured on another engine");
}

// A variable whose last recorded ops are several reads is released by the
// op that follows exactly those reads (no count of them): a push after the
// replay that writes it waits for both reads, and runs before the replay
// ends (here: before an op of the replay that waits for that push).
TEST(GraphReplay, AVariableReadLastBySeveralIsReleasedByTheOpThatFollowsThemAll) {
  for (const EngineKind kind : {EngineKind::pooled, EngineKind::per_device}) {
    SCOPED_TRACE(static_cast<int>(kind));
    Engine engine(Options{.kind = kind, .cpu_workers = 4});
    Var x = engine.new_variable(), y1 = engine.new_variable(), y2 = engine.new_variable();
    Var z = engine.new_variable(), q = engine.new_variable();
    // Each graph's capture keeps what is idle. The first replay takes every
    // access over from its keeper; before the second, a push takes q back,
    // so that replay holds q through its holders and takes the rest.
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE(round);
      auto reads_go = std::make_shared<Gate>();
      auto write_ran = std::make_shared<Gate>();
      std::atomic<int> reads_done{0};
      std::atomic<int> seen_by_write{-1};
      std::atomic<bool> waiter_saw_write{false};
      Graph g = engine.capture([&] {
        engine.push_sync([] {}, Context::cpu(), {}, {x}, {.name = "writes x"});
        engine.push_sync([&, reads_go] { reads_go->wait(std::chrono::seconds(20)); ++reads_done; }, Context::cpu(), {x}, {y1});
        engine.push_sync([&] { ++reads_done; }, Context::cpu(), {x}, {y2});
        engine.push_sync([] {}, Context::cpu(), {y1, y2}, {z}, {.name = "follows both reads"});
        engine.push_sync([&, write_ran] { waiter_saw_write = write_ran->wait(std::chrono::seconds(20)); }, Context::cpu(),
                         {}, {q}, {.name = "waits for the write after the replay"});
      });
      if (round == 1) engine.push_sync([] {}, Context::cpu(), {}, {q});
      engine.replay(g);
      engine.push_sync([&, write_ran] { seen_by_write = reads_done.load(); write_ran->open(); }, Context::cpu(), {}, {x});
      EXPECT_FALSE(write_ran->wait(std::chrono::milliseconds(100))) << "the write ran before a read of the replay";
      reads_go->open();
      EXPECT_TRUE(write_ran->wait(std::chrono::seconds(20))) << "the write waited for the whole replay";
      engine.wait_for_all();
      EXPECT_EQ(seen_by_write.load(), 2);
      EXPECT_TRUE(waiter_saw_write.load());
    }
  }
}

}  // namespace
}  // namespace ordo::test
