// A random trace (tests/core's differential generator) captured once and
// replayed N times must leave the variables bit-identical to the same
// sequence pushed N times and to a serial run, on every engine kind and
// worker count, while two other threads push conflicting ops on the same
// variables in between.
#include "core/differential_trace.hpp"
#include "core/test_util.hpp"
#include "graph/graph_test_util.hpp"
#include "ordo/graph.hpp"

namespace ordo::test {
namespace {

constexpr int kVars = 48;

/// The index an op folds into the values in replay `rep`: the op's own for
/// an operator (its body is fixed), else shifted by the replay, which the
/// captured bodies read as the replay's argument (ordo::replay_arg).
std::size_t op_index(const Trace& t, std::size_t i, int rep) {
  return is_operator(t, i) ? i : i + static_cast<std::size_t>(rep) * t.ops.size();
}

std::vector<std::uint64_t> run_serial(const Trace& t, int reps) {
  std::vector<std::uint64_t> vals(kVars, 0);
  for (int rep = 0; rep < reps; ++rep) {
    for (std::size_t i = 0; i < t.ops.size(); ++i) apply_op(t.ops[i], op_index(t, i, rep), vals);
  }
  return vals;
}

SerialHistory serial_history(const Trace& t, int reps) {
  std::vector<std::uint64_t> vals(kVars, 0);
  SerialHistory seen(kVars);
  for (int rep = 0; rep < reps; ++rep) {
    for (std::size_t i = 0; i < t.ops.size(); ++i) {
      apply_op(t.ops[i], op_index(t, i, rep), vals);
      seen.observe(t.ops[i].writes, vals);
    }
  }
  return seen;
}

/// replayed_profiled: with the profiler on, a replay pushes its recorded ops
/// one by one (src/graph/replay.cpp); without it, they wait in the replay.
enum class Mode { pushed, replayed, replayed_profiled };

struct Outcome {
  std::vector<std::uint64_t> vals;
  int foreign_seen_bad = 0;  ///< conflicting ops that saw a value the serial run never had
};

Outcome run(const Trace& t, int reps, const EngineConfig& cfg, Mode mode, std::uint64_t seed) {
  Outcome out;
  out.vals.assign(kVars, 0);
  std::vector<std::uint64_t>& vals = out.vals;
  const SerialHistory history = serial_history(t, reps);
  ThreadExecutor completer;  // completes async ops; outlives the engine
  {
    Options options = cfg.options;
    if (mode == Mode::replayed_profiled) options.profile.enabled = true;
    Engine engine(options);
    TraceOps trace(engine, t, vals, cfg.inline_ok, completer);
    // One pass of the trace. `rep` < 0: inside a capture, the bodies read
    // the replay's number from their replay's argument.
    auto push_trace = [&](int rep) {
      for (std::size_t i = 0; i < t.ops.size(); ++i) {
        if (is_operator(t, i)) {
          trace.push_operator(i);
        } else {
          trace.push(t.ops[i], [&t, i, rep] { return op_index(t, i, rep >= 0 ? rep : replay_arg<int>()); });
        }
      }
    };
    Graph g;
    if (mode != Mode::pushed) {
      g = engine.capture([&] { push_trace(-1); });
      EXPECT_EQ(g.size(), t.ops.size());
    }
    // Two threads push conflicting ops on the shared variables meanwhile.
    ForeignPushers foreign(engine, trace.vars(), vals, history, seed);
    for (int rep = 0; rep < reps; ++rep) {
      if (mode == Mode::pushed) {
        push_trace(rep);
      } else {
        engine.replay(g, rep);
      }
    }
    foreign.stop();
    out.foreign_seen_bad = foreign.bad();
    {
      // Bounded first: a replay and a push ordered differently on two
      // variables wait for each other forever (the engine's destructor then
      // says what waits).
      auto gate = std::make_shared<Gate>();
      engine.push_sync([gate] { gate->open(); }, Context::cpu(), {}, trace.vars());
      EXPECT_TRUE(gate->wait(std::chrono::seconds(60))) << "engine " << cfg.label << ", seed=" << seed;
    }
    engine.wait_for_all();
  }
  return out;
}

TEST(GraphEquivalence, ReplayedMatchesPushedAndSerialOnEveryEngine) {
  const int reps = 12;
  for (int round = 0; round < 3; ++round) {
    const std::uint64_t seed = test_seed(("graph" + std::to_string(round)).c_str());
    const Trace trace = make_trace(seed, kVars, 240 / kScale);
    const auto expected = run_serial(trace, reps);
    for (const auto& cfg : all_engine_configs()) {
      const Outcome pushed = run(trace, reps, cfg, Mode::pushed, seed);
      const Outcome replayed = run(trace, reps, cfg, Mode::replayed, seed);
      const Outcome profiled = run(trace, reps, cfg, Mode::replayed_profiled, seed);
      ASSERT_EQ(pushed.vals, expected) << "pushed, engine " << cfg.label << ", seed=" << seed;
      ASSERT_EQ(replayed.vals, expected) << "replayed, engine " << cfg.label << ", seed=" << seed;
      EXPECT_EQ(pushed.foreign_seen_bad, 0) << "pushed, engine " << cfg.label << ", seed=" << seed;
      EXPECT_EQ(replayed.foreign_seen_bad, 0) << "replayed, engine " << cfg.label << ", seed=" << seed;
      ASSERT_EQ(profiled.vals, expected) << "replayed with the profiler on, engine " << cfg.label << ", seed=" << seed;
      EXPECT_EQ(profiled.foreign_seen_bad, 0) << "replayed with the profiler on, engine " << cfg.label;
    }
  }
}

}  // namespace
}  // namespace ordo::test
