// Random dependency traces run on every engine and worker count; the final
// variable values must be bit-identical to a serial run of the same trace.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "differential_trace.hpp"
#include "test_util.hpp"

namespace ordo::test {
namespace {

/// The body every run executes: a deterministic function of the op index and
/// the values it reads, folded into the values it writes.
void body(const OpSpec& op, std::size_t index, std::vector<std::uint64_t>& vals) { apply_op(op, index, vals); }

std::vector<std::uint64_t> run_serial(const Trace& t) { return replay_serial(t.ops, t.vars); }


std::vector<std::uint64_t> run_engine(const Trace& t, const EngineConfig& cfg) {
  std::vector<std::uint64_t> vals(static_cast<std::size_t>(t.vars), 0);
  ThreadExecutor completer;  // completes async ops; outlives the engine (destroyed after it drains)
  {
    Engine engine(cfg.options);
    std::vector<Var> vars;
    for (int i = 0; i < t.vars; ++i) vars.push_back(engine.new_variable());
    std::vector<Var> reads, writes;
    for (std::size_t i = 0; i < t.ops.size(); ++i) {
      const OpSpec& op = t.ops[i];
      reads.clear();
      writes.clear();
      for (int r : op.reads) reads.push_back(vars[static_cast<std::size_t>(r)]);
      for (int w : op.writes) writes.push_back(vars[static_cast<std::size_t>(w)]);
      switch (op.kind) {
        case Kind::sync:
        case Kind::oper:
          engine.push_sync([&op, i, &vals] { body(op, i, vals); }, Context::cpu(), reads, writes,
                           {.inline_ok = cfg.inline_ok});
          break;
        case Kind::prioritized:
          engine.push_sync([&op, i, &vals] { body(op, i, vals); }, Context::cpu(), reads, writes,
                           {.prop = FnProperty::cpu_prioritized, .priority = op.priority});
          break;
        case Kind::async_inline:
          engine.push_async(
              [&op, i, &vals](RunContext, OnComplete done) {
                body(op, i, vals);
                done();
              },
              Context::cpu(), reads, writes);
          break;
        case Kind::async_thread:
          engine.push_async(
              [&op, i, &vals, &completer](RunContext, OnComplete done) {
                body(op, i, vals);
                completer.post([done] { done(); });
              },
              Context::cpu(), reads, writes, {.prop = FnProperty::async});
          break;
      }
    }
    engine.wait_for_all();
  }
  return vals;
}

TEST(Differential, RandomTracesMatchSerialOnEveryEngine) {
  const int ops = 12000 / kScale;
  for (int round = 0; round < 3; ++round) {
    const std::uint64_t seed = test_seed(("trace" + std::to_string(round)).c_str());
    const Trace trace = make_trace(seed, 300, ops);
    const auto expected = run_serial(trace);
    for (const auto& cfg : all_engine_configs()) {
      const auto got = run_engine(trace, cfg);
      ASSERT_EQ(got, expected) << "engine " << cfg.label << " diverged from the serial run, seed=" << seed;
    }
  }
}

TEST(Differential, PreBuiltOperatorsMatchSerial) {
  // A fixed set of operators pushed in random order: same check, no ad-hoc lists.
  const std::uint64_t seed = test_seed("operators");
  std::mt19937_64 rng(seed);
  const Trace shapes = make_trace(seed, 64, 32);
  std::vector<int> order(static_cast<std::size_t>(20000 / kScale));
  for (auto& o : order) o = static_cast<int>(rng() % shapes.ops.size());

  std::vector<std::uint64_t> expected(64, 0);
  for (std::size_t i = 0; i < order.size(); ++i) {
    body(shapes.ops[static_cast<std::size_t>(order[i])], static_cast<std::size_t>(order[i]), expected);
  }
  for (const auto& cfg : all_engine_configs()) {
    std::vector<std::uint64_t> vals(64, 0);
    Engine engine(cfg.options);
    std::vector<Var> vars;
    for (int i = 0; i < 64; ++i) vars.push_back(engine.new_variable());
    std::vector<Operator> opers;
    for (std::size_t k = 0; k < shapes.ops.size(); ++k) {
      const OpSpec& op = shapes.ops[k];
      std::vector<Var> reads, writes;
      for (int r : op.reads) reads.push_back(vars[static_cast<std::size_t>(r)]);
      for (int w : op.writes) writes.push_back(vars[static_cast<std::size_t>(w)]);
      opers.push_back(engine.new_operator([&op, k, &vals] { body(op, k, vals); }, reads, writes));
    }
    for (int o : order) engine.push(opers[static_cast<std::size_t>(o)], Context::cpu());
    for (auto& op : opers) engine.delete_operator(op);
    engine.wait_for_all();
    ASSERT_EQ(vals, expected) << "engine " << cfg.label << " seed=" << seed;
  }
}

}  // namespace
}  // namespace ordo::test
