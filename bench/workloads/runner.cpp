// bench/workloads/runner.cpp - the serial loop and the ordo replays.
#include "runner.hpp"

#include <algorithm>
#include <chrono>
#include <span>

#include <ordo/ordo.hpp>

namespace ordo_bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct RunResult {
  double seconds = 0;
  std::uint64_t digest = 0;
  double new_variable_ns = 0;
  unsigned workers = 0;
};

RunResult run_serial(const Trace& t) {
  std::vector<std::uint64_t> slots = initial_slots(t.num_vars);
  const auto n = static_cast<std::uint32_t>(t.ops());
  const auto t0 = Clock::now();
  for (std::uint32_t i = 0; i < n; ++i) run_op(t, slots.data(), i);
  const auto t1 = Clock::now();
  return {seconds_between(t0, t1), digest(slots), 0, 0};
}

/// Pushes every op of the trace with push_sync, its variable lists built on
/// the fly from the trace's indices (a small copy per push, as a framework
/// translating its own graph would do).
void push_each(ordo::Engine& engine, const Trace& t, const std::vector<ordo::Var>& vars, std::uint64_t* slots) {
  const auto n = static_cast<std::uint32_t>(t.ops());
  const Trace* trace = &t;
  ordo::Var buf[kMaxAccess];
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t* a = t.acc.data() + t.begin[i];
    const std::uint32_t na = t.begin[i + 1] - t.begin[i];
    const std::uint32_t nr = t.n_reads[i];
    for (std::uint32_t k = 0; k < na; ++k) buf[k] = vars[a[k]];
    engine.push_sync([trace, slots, i](ordo::RunContext) { run_op(*trace, slots, i); }, ordo::Context::cpu(),
                     std::span<const ordo::Var>(buf, nr), std::span<const ordo::Var>(buf + nr, na - nr));
  }
}

/// Pushes one pre-built operator `count` times.
void push_operator(ordo::Engine& engine, ordo::Operator op, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) engine.push(op, ordo::Context::cpu());
}

RunResult run_ordo(const Trace& t, const ordo::Options& options) {
  std::vector<std::uint64_t> slots = initial_slots(t.num_vars);  // outlives the engine
  ordo::Engine engine(options);
  std::vector<ordo::Var> vars;
  vars.reserve(t.num_vars);
  const auto c0 = Clock::now();
  for (std::uint32_t v = 0; v < t.num_vars; ++v) vars.push_back(engine.new_variable());
  const auto c1 = Clock::now();

  // A pre-built operator carries one set of variable lists: every op of such a
  // trace has the same lists (make_trace checks it) and mutates them, so the
  // pushes run in push order and a counter in the body recovers the op index.
  ordo::Operator op;
  std::uint32_t counter = 0;  // guarded by the engine's ordering
  if (t.prebuilt_operator) {
    std::vector<ordo::Var> reads;
    std::vector<ordo::Var> writes;
    for (const std::uint32_t v : t.reads(0)) reads.push_back(vars[v]);
    for (const std::uint32_t v : t.writes(0)) writes.push_back(vars[v]);
    const Trace* trace = &t;
    std::uint64_t* s = slots.data();
    op = engine.new_operator([trace, s, &counter](ordo::RunContext) { run_op(*trace, s, counter++); }, reads,
                             writes);
  }

  const auto t0 = Clock::now();
  if (t.prebuilt_operator) {
    push_operator(engine, op, t.ops());
  } else {
    push_each(engine, t, vars, slots.data());
  }
  engine.wait_for_all();
  const auto t1 = Clock::now();

  if (!op.empty()) engine.delete_operator(op);
  const double create_ns = t.num_vars > 0 ? seconds_between(c0, c1) * 1e9 / t.num_vars : 0.0;
  const unsigned workers = options.kind == ordo::EngineKind::naive ? 0 : engine.options().cpu_workers;
  return {seconds_between(t0, t1), digest(slots), create_ns, workers};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

const std::vector<EngineSpec>& all_engines() {
  static const std::vector<EngineSpec> engines = [] {
    using ordo::EngineKind;
    std::vector<EngineSpec> e;
    e.push_back({"serial", std::nullopt, "the trace replayed in a plain loop on the calling thread"});
    e.push_back({"ordo", ordo::Options{}, "ordo::Options{}: per_device, one CPU worker per hardware thread"});
    e.push_back({"ordo-1w", ordo::Options{.kind = EngineKind::per_device, .cpu_workers = 1},
                 "per_device, cpu_workers = 1"});
    e.push_back({"ordo-2w", ordo::Options{.kind = EngineKind::per_device, .cpu_workers = 2},
                 "per_device, cpu_workers = 2"});
    e.push_back({"ordo-pooled", ordo::Options{.kind = EngineKind::pooled},
                 "pooled, one CPU worker per hardware thread"});
    e.push_back({"ordo-naive", ordo::Options{.kind = EngineKind::naive},
                 "naive: every op runs inline on the thread that makes it ready"});
    return e;
  }();
  return engines;
}

const EngineSpec* find_engine(std::string_view name) {
  for (const EngineSpec& e : all_engines()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Measurement measure(const EngineSpec& engine, const Trace& trace, int runs, std::optional<std::uint64_t> reference,
                    const RunHook& before_run) {
  Measurement m;
  m.ops = trace.ops();
  std::vector<double> create_ns;
  bool consistent = true;
  for (int r = 1; r <= runs; ++r) {
    if (before_run) before_run(r, runs);
    const RunResult res = engine.ordo ? run_ordo(trace, *engine.ordo) : run_serial(trace);
    if (r == 1) m.digest = res.digest;
    consistent = consistent && res.digest == m.digest && (!reference || res.digest == *reference);
    m.seconds.push_back(res.seconds);
    create_ns.push_back(res.new_variable_ns);
    m.workers = res.workers;
  }
  m.new_variable_ns = median(create_ns);
  m.ok = consistent;
  if (!m.ok) m.error = "digest_mismatch";
  return m;
}

}  // namespace ordo_bench
