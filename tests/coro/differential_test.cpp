// Random traces mixing coroutine ops (leases, function form, pairs pushed
// eagerly, when_all children) and plain ops on the same variables, run on
// every engine; the final values must be bit-identical to a serial run.
//
// Every coroutine here pushes all its ops before its first suspension, so
// (spawned from the test thread) they are registered in trace order: the
// engine's ordering rule then fixes the result whatever the schedule.
#include <string>
#include <vector>

#include "coro_test_util.hpp"

namespace ordo::test {
namespace {

enum class Kind : std::uint8_t { plain_sync, plain_async, lease, lease_nested, fn, pair, when_all_pair };

struct OpSpec {
  std::vector<int> reads;   // may overlap writes and hold duplicates
  std::vector<int> writes;  // at least one
  int spin = 0;
};

struct Step {
  Kind kind;
  std::size_t first;  // index of the step's first op (pairs take two)
};

struct Trace {
  int vars = 0;
  std::vector<OpSpec> ops;
  std::vector<Step> steps;
};

Trace make_trace(std::uint64_t seed, int vars, int ops) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  Trace t;
  t.vars = vars;
  t.ops.resize(static_cast<std::size_t>(ops));
  for (auto& op : t.ops) {
    for (int i = pick(5); i > 0; --i) op.reads.push_back(pick(vars));
    for (int i = 1 + pick(2); i > 0; --i) op.writes.push_back(pick(vars));
    op.spin = pick(4) == 0 ? pick(3000) : 0;
  }
  for (std::size_t i = 0; i < t.ops.size();) {
    const int k = pick(100);
    Kind kind = k < 30 ? Kind::plain_sync : k < 40 ? Kind::plain_async : k < 60 ? Kind::lease
              : k < 70 ? Kind::lease_nested : k < 82 ? Kind::fn : k < 91 ? Kind::pair : Kind::when_all_pair;
    const bool two = kind == Kind::pair || kind == Kind::when_all_pair;
    if (two && i + 1 >= t.ops.size()) kind = Kind::lease;
    t.steps.push_back({kind, i});
    i += (kind == Kind::pair || kind == Kind::when_all_pair) ? 2 : 1;
  }
  return t;
}

void body(const OpSpec& op, std::size_t index, std::vector<std::uint64_t>& vals) { apply_op(op, index, vals); }

std::vector<std::uint64_t> run_serial(const Trace& t) { return replay_serial(t.ops, t.vars); }

/// One run of a trace on one engine.
class TraceRun {
 public:
  TraceRun(const Trace& t, const Options& options) : t_(t), engine_(options) {
    for (int i = 0; i < t.vars; ++i) vars_.push_back(engine_.new_variable());
    vals_.assign(static_cast<std::size_t>(t.vars), 0);
    for (const auto& op : t.ops) {
      std::vector<Var> r, w;
      for (int i : op.reads) r.push_back(vars_[static_cast<std::size_t>(i)]);
      for (int i : op.writes) w.push_back(vars_[static_cast<std::size_t>(i)]);
      reads_.push_back(std::move(r));
      writes_.push_back(std::move(w));
    }
  }

  std::vector<std::uint64_t> go() {
    AsyncScope scope;
    for (const Step& s : t_.steps) {
      const std::size_t i = s.first;
      switch (s.kind) {
        case Kind::plain_sync:
          engine_.push_sync([this, i] { run_body(i); }, Context::cpu(), reads_[i], writes_[i]);
          break;
        case Kind::plain_async:
          engine_.push_async([this, i](RunContext, OnComplete done) { run_body(i); done(); }, Context::cpu(),
                             reads_[i], writes_[i], {.prop = FnProperty::async});
          break;
        case Kind::lease: scope.spawn(lease(i)); break;
        case Kind::lease_nested: scope.spawn(lease_nested(i)); break;
        case Kind::fn: scope.spawn(fn(i)); break;
        case Kind::pair: scope.spawn(pair(i)); break;
        case Kind::when_all_pair: scope.spawn(both(i)); break;
      }
    }
    scope.sync_join();
    engine_.wait_for_all();
    EXPECT_EQ(bad_results_, 0);
    return vals_;
  }

 private:
  void run_body(std::size_t i) { body(t_.ops[i], i, vals_); }
  LeaseAwaitable push_op(std::size_t i) { return push(engine_, reads(reads_[i]), writes(writes_[i])); }

  Task<void> lease(std::size_t i) {
    Lease l = co_await push_op(i);
    run_body(i);
  }
  Task<void> sub(std::size_t i) {
    run_body(i);
    co_return;
  }
  Task<void> lease_nested(std::size_t i) {
    Lease l = co_await push_op(i);
    co_await sub(i);  // the lease is held across a nested task
    l.release();
  }
  Task<void> fn(std::size_t i) {
    const std::size_t r = co_await push(engine_, reads(reads_[i]), writes(writes_[i]), [this, i] {
      run_body(i);
      return i;
    });
    if (r != i) ++bad_results_;  // only the test thread reads it, after the join
  }
  Task<void> pair(std::size_t i) {
    auto a = push_op(i);  // both registered now, in order
    auto b = push_op(i + 1);
    {
      Lease l = co_await a;
      run_body(i);
    }  // released before awaiting b, which may wait for it
    Lease l = co_await b;
    run_body(i + 1);
  }
  Task<void> both(std::size_t i) { co_await when_all(lease(i), lease(i + 1)); }

  const Trace& t_;
  Engine engine_;
  std::vector<Var> vars_;
  std::vector<std::uint64_t> vals_;
  std::vector<std::vector<Var>> reads_;
  std::vector<std::vector<Var>> writes_;
  std::atomic<int> bad_results_{0};
};

class CoroDifferential : public ::testing::TestWithParam<EngineConfig> {};

TEST_P(CoroDifferential, MatchesSerialRun) {
  const std::uint64_t seed = test_seed("coro_differential");
  const int ops = 1000 / kScale;
  for (std::uint64_t round = 0; round < 4; ++round) {
    const std::uint64_t s = mix(seed, round);
    const Trace t = make_trace(s, 10, ops);
    const auto expected = run_serial(t);
    TraceRun run(t, GetParam().options);
    ASSERT_EQ(run.go(), expected) << "seed=" << seed << " round=" << round;
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, CoroDifferential, ::testing::ValuesIn(all_engine_configs()), config_name);

}  // namespace
}  // namespace ordo::test
