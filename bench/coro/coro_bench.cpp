// ordo_coro_bench - figures for the coroutine layer (ordo/coro.hpp).
//
//   C1  co_await push(...) round trip (push, grant, resume, release) on an
//       uncontended variable, one coroutine awaiting in a loop; against plain
//       push_sync ops on one variable on the same engine.
//   C2  a chain of 1M coroutine steps on one variable: each step is its own
//       Task awaiting a function-form push that writes the variable.
//   C3  2 workers, 10,000 coroutines each holding a lease on its own variable
//       while awaiting an external event (set later by another thread), while
//       plain CPU ops run: plain-op throughput with and without them.
//
// Prints one line per figure: RESULT engine=ordo-coro workload=<id> ops_per_s=<x> ok=<0|1>
// (median of 5 runs). Not a test. Options: --quick (smaller sizes, 1 run).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "ordo/coro.hpp"
#include "ordo/ordo.hpp"
#include "ordo/task.hpp"

namespace {

using Clock = std::chrono::steady_clock;

int g_runs = 5;
long g_scale = 1;  // divisor for --quick

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

template <class F>
double median_rate(F&& run_once) {
  std::vector<double> rates;
  for (int i = 0; i < g_runs; ++i) rates.push_back(run_once());
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

void result(const char* id, double ops_per_s, bool ok) {
  std::printf("RESULT engine=ordo-coro workload=%s ops_per_s=%.0f ok=%d\n", id, ops_per_s, ok ? 1 : 0);
  std::fflush(stdout);
}

ordo::Options two_workers() {
  ordo::Options o;
  o.kind = ordo::EngineKind::per_device;
  o.cpu_workers = 2;
  return o;
}

// ------------------------------------------------------------------ C1
double c1_coro(long n) {
  ordo::Engine engine(two_workers());
  ordo::Var x = engine.new_variable();
  auto loop = [&]() -> ordo::Task<void> {
    for (long i = 0; i < n; ++i) {
      ordo::Lease l = co_await ordo::push(engine, ordo::reads(), ordo::writes(x));
    }
  };
  const auto t0 = Clock::now();
  ordo::sync_wait(loop());
  engine.wait_for_var(x);
  const double s = seconds_since(t0);
  if (engine.var_version(x) != static_cast<std::uint64_t>(n)) std::fprintf(stderr, "C1: wrong version\n");
  return static_cast<double>(n) / s;
}

double c1_push_sync(long n) {
  ordo::Engine engine(two_workers());
  ordo::Var x = engine.new_variable();
  const auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) engine.push_sync([] {}, ordo::Context::cpu(), {}, {x});
  engine.wait_for_var(x);
  const double s = seconds_since(t0);
  return static_cast<double>(n) / s;
}

// ------------------------------------------------------------------ C2
ordo::Task<void> c2_step(ordo::Engine& engine, ordo::Var x, long& counter) {
  co_await ordo::push(engine, ordo::reads(), ordo::writes(x), [&counter] { ++counter; });
}

double c2_chain(long n, bool& ok) {
  ordo::Engine engine(two_workers());
  ordo::Var x = engine.new_variable();
  long counter = 0;
  auto chain = [&]() -> ordo::Task<void> {
    for (long i = 0; i < n; ++i) co_await c2_step(engine, x, counter);
  };
  const auto t0 = Clock::now();
  ordo::sync_wait(chain());
  const double s = seconds_since(t0);
  engine.wait_for_var(x);
  ok = ok && counter == n;
  return static_cast<double>(n) / s;
}

// ------------------------------------------------------------------ C3
/// A single-waiter event: co_await suspends until set(), which resumes the
/// waiter on the setting thread.
class Event {
 public:
  void set() {
    void* prev = state_.exchange(this, std::memory_order_acq_rel);
    if (prev != nullptr && prev != this) ordo::detail::resume(std::coroutine_handle<>::from_address(prev));
  }
  bool await_ready() const noexcept { return state_.load(std::memory_order_acquire) == this; }
  bool await_suspend(std::coroutine_handle<> h) noexcept {
    void* expected = nullptr;
    return state_.compare_exchange_strong(expected, h.address(), std::memory_order_acq_rel);
  }
  void await_resume() const noexcept {}

 private:
  std::atomic<void*> state_{nullptr};
};

std::uint64_t cpu_work(std::uint64_t seed) {
  std::uint64_t h = seed;
  for (int i = 0; i < 64; ++i) h = h * 6364136223846793005ULL + 1442695040888963407ULL;
  return h;
}

/// Plain ops: `n` push_sync ops round-robin over 64 variables (each writes
/// one), pushed from this thread; returns ops/s until all have finished.
double plain_ops(ordo::Engine& engine, const std::vector<ordo::Var>& vars, std::vector<std::uint64_t>& sinks,
                 long n) {
  const auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    const std::size_t k = static_cast<std::size_t>(i) % vars.size();
    std::uint64_t* sink = &sinks[k];
    engine.push_sync([sink] { *sink = cpu_work(*sink); }, ordo::Context::cpu(), {}, {vars[k]});
  }
  for (ordo::Var v : vars) engine.wait_for_var(v);
  return static_cast<double>(n) / seconds_since(t0);
}

double c3(long n, long holders, std::size_t max_in_flight) {
  ordo::Options o = two_workers();
  o.max_in_flight = max_in_flight;
  ordo::Engine engine(o);
  std::vector<ordo::Var> vars;
  for (int i = 0; i < 64; ++i) vars.push_back(engine.new_variable());
  std::vector<std::uint64_t> sinks(vars.size(), 1);
  std::vector<ordo::Var> held;
  for (long i = 0; i < holders; ++i) held.push_back(engine.new_variable());
  std::vector<Event> events(static_cast<std::size_t>(holders));
  std::atomic<long> granted{0};
  ordo::AsyncScope scope;
  auto holder = [&](long i) -> ordo::Task<void> {
    ordo::Lease l = co_await ordo::push(engine, ordo::reads(), ordo::writes(held[static_cast<std::size_t>(i)]));
    granted.fetch_add(1, std::memory_order_relaxed);
    co_await events[static_cast<std::size_t>(i)];
  };
  for (long i = 0; i < holders; ++i) scope.spawn(holder(i));
  while (granted.load() < holders) std::this_thread::yield();  // all leases held
  const double rate = plain_ops(engine, vars, sinks, n);
  std::thread setter([&] {
    for (auto& e : events) e.set();
  });
  setter.join();
  scope.sync_join();
  engine.wait_for_all();
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      g_runs = 1;
      g_scale = 20;
    }
  }
  const long n1 = 1'000'000 / g_scale;

  const double coro = median_rate([&] { return c1_coro(n1); });
  const double sync = median_rate([&] { return c1_push_sync(n1); });
  const double ratio = coro / sync;
  result("C1-coro-roundtrip", coro, coro >= 5e6 && ratio >= 0.5);
  result("C1-push_sync", sync, true);
  std::printf("RATIO C1 coro/push_sync=%.3f (target >= 0.5)\n", ratio);

  bool ok2 = true;
  const double chain = median_rate([&] { return c2_chain(n1, ok2); });
  result("C2-chain-1M", chain, ok2 && chain >= 5e6);

  const long n3 = 1'000'000 / g_scale;
  for (std::size_t mif : {std::size_t{4096}, std::size_t{0}}) {
    // Both with the default backpressure window and without it: held leases
    // (started async ops) do not count against the window.
    const long n = n3;
    const double base = median_rate([&] { return c3(n, 0, mif); });
    const double with = median_rate([&] { return c3(n, 10'000, mif); });
    char id_base[64];
    char id_with[64];
    std::snprintf(id_base, sizeof id_base, "C3-plain-alone-mif%zu", mif);
    std::snprintf(id_with, sizeof id_with, "C3-plain-with-10k-held-mif%zu", mif);
    result(id_base, base, true);
    result(id_with, with, with >= 0.9 * base);
    std::printf("RATIO C3 with/alone (max_in_flight=%zu)=%.3f (target >= 0.9)\n", mif, with / base);
  }
  return 0;
}
