// bench/workloads/runner.cpp - the serial loop and the ordo replays.
#include "runner.hpp"

#include <algorithm>
#include <chrono>
#include <span>
#include <cstdio>
#include <latch>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include <ordo/coro.hpp>
#include <ordo/ordo.hpp>
#include <ordo/task.hpp>

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

/// The busy work of every op of `t` (W6), split evenly over one plain thread
/// per core with no dependencies and no engine; returns its seconds. Threads
/// start before timing and are released together.
double run_split(const Trace& t) {
  const unsigned threads = ordo::usable_cpus();  // as many as ordo's default workers
  const auto n = static_cast<std::uint32_t>(t.ops());
  std::vector<std::uint64_t> sinks(std::size_t{threads} * 8);  // a cache line each
  std::latch start(1);
  auto share = [&](unsigned k) {
    std::uint64_t h = 0;
    for (std::uint32_t i = k; i < n; i += threads) h ^= busy_work(mix(kOpSeed, i), t.spin_iters);
    sinks[std::size_t{k} * 8] = h;
  };
  std::vector<std::thread> pool;
  for (unsigned k = 1; k < threads; ++k) {
    pool.emplace_back([&, k] {
      start.wait();
      share(k);
    });
  }
  const auto t0 = Clock::now();
  start.count_down();
  share(0);
  for (auto& th : pool) th.join();
  const auto t1 = Clock::now();
  if (std::find(sinks.begin(), sinks.end(), 1) != sinks.end()) std::puts("");  // keeps the work observable
  return seconds_between(t0, t1);
}

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
void push_each(ordo::Engine& engine, const Trace& t, const std::vector<ordo::Var>& vars, std::uint64_t* slots,
               const ordo::OpAttrs& attrs) {
  const auto n = static_cast<std::uint32_t>(t.ops());
  const Trace* trace = &t;
  ordo::Var buf[kMaxAccess];
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t* a = t.acc.data() + t.begin[i];
    const std::uint32_t na = t.begin[i + 1] - t.begin[i];
    const std::uint32_t nr = t.n_reads[i];
    for (std::uint32_t k = 0; k < na; ++k) buf[k] = vars[a[k]];
    engine.push_sync([trace, slots, i](ordo::RunContext) { run_op(*trace, slots, i); }, ordo::Context::cpu(),
                     std::span<const ordo::Var>(buf, nr), std::span<const ordo::Var>(buf + nr, na - nr), attrs);
  }
}

/// One op of a coroutine workload: awaits its accesses (the access form of
/// ordo::push), runs the body on the worker that granted them, releases
/// them with the lease. The lists are copied into the frame (by value).
ordo::Task<void> coro_op(ordo::Engine& engine, ordo::Reads reads, ordo::Writes writes, const Trace& t,
                         std::uint64_t* slots, std::uint32_t i) {
  ordo::Lease lease = co_await engine.push(reads, writes);
  run_op(t, slots, i);
}

/// Spawns one coroutine per op of the trace (each pushes its op before
/// spawn returns, so push order is trace order) and joins them.
void spawn_each(ordo::Engine& engine, const Trace& t, const std::vector<ordo::Var>& vars, std::uint64_t* slots) {
  const auto n = static_cast<std::uint32_t>(t.ops());
  ordo::AsyncScope scope;
  ordo::Var buf[kMaxAccess];
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t* a = t.acc.data() + t.begin[i];
    const std::uint32_t na = t.begin[i + 1] - t.begin[i];
    const std::uint32_t nr = t.n_reads[i];
    for (std::uint32_t k = 0; k < na; ++k) buf[k] = vars[a[k]];
    scope.spawn(coro_op(engine, ordo::reads(std::span<const ordo::Var>(buf, nr)),
                        ordo::writes(std::span<const ordo::Var>(buf + nr, na - nr)), t, slots, i));
  }
  scope.sync_join();
}

/// Pushes one pre-built operator `count` times.
void push_operator(ordo::Engine& engine, ordo::Operator op, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) engine.push(op, ordo::Context::cpu());
}

RunResult run_ordo(const Trace& t, const ordo::Options& options, bool inline_ok, bool graph, bool warm) {
  const ordo::OpAttrs attrs{.inline_ok = inline_ok};
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
                             writes, attrs);
  }

  // A graph holds the same pushes (a coroutine trace's as plain pushes:
  // coroutine pushes cannot be captured), recorded before timing.
  ordo::Graph captured;
  if (graph) {
    captured = engine.capture([&] {
      if (t.prebuilt_operator) {
        push_operator(engine, op, t.ops());
      } else {
        push_each(engine, t, vars, slots.data(), attrs);
      }
    });
    if (warm) {
      // A loop's first replay, untimed; the slots as they were before it.
      engine.replay(captured);
      engine.wait_for_all();
      const std::vector<std::uint64_t> initial = initial_slots(t.num_vars);
      std::copy(initial.begin(), initial.end(), slots.begin());  // in place: the bodies hold slots.data()
      counter = 0;
    }
  }

  const auto t0 = Clock::now();
  if (graph) {
    engine.replay(captured);
  } else if (t.prebuilt_operator) {
    push_operator(engine, op, t.ops());
  } else if (t.coroutine) {
    spawn_each(engine, t, vars, slots.data());
  } else {
    push_each(engine, t, vars, slots.data(), attrs);
  }
  engine.wait_for_all();
  const auto t1 = Clock::now();

  if (!op.empty()) engine.delete_operator(op);
  const double create_ns = t.num_vars > 0 ? seconds_between(c0, c1) * 1e9 / t.num_vars : 0.0;
  const unsigned workers = options.kind == ordo::EngineKind::naive ? 0 : engine.options().cpu_workers;
  return {seconds_between(t0, t1), digest(slots), create_ns, workers};
}

}  // namespace

const std::vector<EngineSpec>& all_engines() {
  static const std::vector<EngineSpec> engines = [] {
    using ordo::EngineKind;
    std::vector<EngineSpec> e;
    e.push_back({"serial", std::nullopt, "the trace replayed in a plain loop on the calling thread"});
    e.push_back({"ordo", ordo::Options{}, "ordo::Options{}: per_device, one CPU worker per usable CPU"});
    e.push_back({"ordo-1w", ordo::Options{.kind = EngineKind::per_device, .cpu_workers = 1},
                 "per_device, cpu_workers = 1"});
    e.push_back({"ordo-2w", ordo::Options{.kind = EngineKind::per_device, .cpu_workers = 2},
                 "per_device, cpu_workers = 2"});
    e.push_back({"ordo-pooled", ordo::Options{.kind = EngineKind::pooled},
                 "pooled, one CPU worker per usable CPU"});
    e.push_back({"ordo-inline", ordo::Options{.kind = EngineKind::per_device},
                 "per_device, one CPU worker per usable CPU, every op pushed with OpAttrs::inline_ok "
                 "(its pusher runs it if it is ready at push)", std::nullopt, true});
    e.push_back({"ordo-graph", ordo::Options{.kind = EngineKind::per_device},
                 "per_device, one CPU worker per usable CPU; the trace's pushes captured once into an ordo::Graph "
                 "before timing (W2co, W4co as plain pushes), timed: Engine::replay and the wait",
                 std::nullopt, false, true});
    e.push_back({"ordo-graph-warm", ordo::Options{.kind = EngineKind::per_device},
                 "ordo-graph, the graph replayed once untimed first (the variables reset after): timed, a "
                 "loop's second replay",
                 std::nullopt, false, true, true});
    e.push_back({"ordo-naive", ordo::Options{.kind = EngineKind::naive},
                 "naive: every op runs inline on the thread that makes it ready"});
    // Peers (bench/peers/): the same trace and op body in another runtime.
    auto peer = [&](std::string name, std::string exe, std::vector<std::string> args, std::string package,
                    std::string description) {
      e.push_back({std::move(name), std::nullopt, std::move(description),
                   PeerSpec{std::move(exe), std::move(args), std::move(package)}});
    };
    peer("omp-gomp", "ordo_peer_omp", {}, "g++ (libgomp)",
         "OpenMP tasks, one `#pragma omp task depend(in: ...) depend(inout: ...)` per op from one thread in "
         "`parallel` + `single`; g++ 12 with libgomp");
    peer("omp-llvm", "ordo_peer_omp_llvm", {}, "clang, libomp-dev",
         "the same OpenMP source built by clang++ 14 with LLVM's libomp");
    peer("tbb-flow", "ordo_peer_tbb", {}, "libtbb-dev",
         "oneTBB flow graph: one continue_node per op, edges from the trace's dependencies (last writer, "
         "readers since it), built before timing; timed: starting the roots to wait_for_all");
    peer("tbb-flow+build", "ordo_peer_tbb", {"--time-build"}, "libtbb-dev",
         "the same, graph construction included in the timed region");
    peer("tbb-flow-warm", "ordo_peer_tbb", {"--warm"}, "libtbb-dev",
         "tbb-flow, the graph executed once untimed first (the variables reset after): timed, its second "
         "execution"); 
    peer("starpu", "ordo_peer_starpu", {}, "libstarpu-dev",
         "StarPU 1.3: one registered variable handle per variable, one task per op with STARPU_R / "
         "STARPU_RW accesses, CPU workers only (one per usable CPU), scheduler eager");
    return e;
  }();
  return engines;
}

std::string peer_executable(const PeerSpec& peer) {
  static const std::string dir = [] {
    char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return std::string(".");
    std::string path(buf, static_cast<std::size_t>(n));
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
  }();
  const std::string path = dir + "/" + peer.executable;
  return access(path.c_str(), X_OK) == 0 ? path : std::string();
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
    if (engine.peer) throw std::logic_error("a peer runs in its own process (figure.cpp)");
    const RunResult res =
        engine.ordo ? run_ordo(trace, *engine.ordo, engine.inline_ok, engine.graph, engine.warm) : run_serial(trace);
    // W6's ceiling column only: a METG sweep's serial run is its reference digest, not a figure.
    if (!engine.ordo && trace.id == "W6") m.split_seconds.push_back(run_split(trace));
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
