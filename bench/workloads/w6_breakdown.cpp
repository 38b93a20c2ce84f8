// bench/workloads/w6_breakdown.cpp - where W6's time goes on ordo.
//
// Replays the W6 trace (the W4 random trace with busy work in every body) on
// a default engine, timing every op body, and splits each run's core time
// into: the bodies, the gaps between one worker's consecutive bodies (the
// engine's per-op work, plus whatever preempted the worker between ops), the
// pusher's CPU time and idle cores. Figures come per worker, with the delay
// before each worker's first op, and for the run: how long 0, 1, 2, ...
// bodies ran at once (with as many bodies as cores the run goes at the
// bodies' speed; each one fewer leaves a core to the engine or to nothing).
// A diagnostic, not a benchmark: the timing inside the bodies adds to every
// op (docs/benchmarks.md). ordo_workloads measures W6's speed.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <ordo/ordo.hpp>

#include "workload.hpp"

namespace ob = ordo_bench;

namespace {

/// Keeps a --no-vars body's result live (its spin is not optimised away)
/// without a store: a shared sink would put a cross-core transfer in every body.
inline void keep(std::uint64_t v) noexcept { asm volatile("" : : "r"(v) : "memory"); }

using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double process_cpu_s() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  auto s = [](const timeval& v) { return static_cast<double>(v.tv_sec) + static_cast<double>(v.tv_usec) * 1e-6; };
  return s(r.ru_utime) + s(r.ru_stime);
}

struct Span {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  int worker = -2;  ///< RunContext::worker (-1: ran on the pusher)
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

void usage() {
  std::fputs(
      "usage: ordo_w6_breakdown [--runs N] [--ops N] [--work-us X] [--max-in-flight N] [--no-vars | --spin-only]\n"
      "  W6 (default 40000 ops x 10 us) on a default engine, each body timed; per run: the\n"
      "  speedup over the serial loop, the pusher's CPU time, idle core time, and per worker:\n"
      "  ops, delay of its first op, body time, gaps between its bodies (median, p90, p99,\n"
      "  and the part in gaps over 5 us: preemption or sleep rather than engine work).\n"
      "  overhead/op: (cores x wall - all bodies) / ops, what the engine, the pusher and idle\n"
      "  cores cost per op; unlike the speedup it leaves out bodies slowed by other load.\n"
      "  The last line gives the medians over the runs.\n"
      "  --no-vars: the same ops and bodies pushed with no variables (the bodies spin only):\n"
      "  the floor that push, hand-off and wake-ups set without any dependency work\n"
      "  --spin-only: the same ops with their variables, bodies that spin only (no variable's data\n"
      "  is read or written): what moving that data between the cores costs the bodies\n",
      stderr);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  std::size_t ops = 40000;
  double work_us = 10;
  std::size_t max_in_flight = ordo::Options{}.max_in_flight;
  bool no_vars = false;
  bool spin_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help") {
      usage();
      return 0;
    }
    if (flag == "--no-vars") {
      no_vars = true;
      continue;
    }
    if (flag == "--spin-only") {
      spin_only = true;
      continue;
    }
    if (i + 1 >= argc) {
      usage();
      return 2;
    }
    const char* v = argv[++i];
    if (flag == "--runs") {
      runs = std::atoi(v);
    } else if (flag == "--ops") {
      ops = std::strtoull(v, nullptr, 10);
    } else if (flag == "--work-us") {
      work_us = std::atof(v);
    } else if (flag == "--max-in-flight") {
      max_in_flight = std::strtoull(v, nullptr, 10);
    } else {
      usage();
      return 2;
    }
  }
  if (runs < 1 || ops < 1 || work_us <= 0 || (no_vars && spin_only)) {
    usage();
    return 2;
  }
  const std::uint32_t spin = ob::calibrate_spin(work_us);
  const ob::Trace t = ob::make_trace("W6", ops, spin);
  const auto n = static_cast<std::uint32_t>(t.ops());
  std::printf("W6 breakdown%s: %u ops x %.3g us (spin_iters=%u), max_in_flight=%zu, %u usable CPUs\n",
              no_vars     ? " (no variables: the bodies only spin)"
              : spin_only ? " (bodies spin only, touching no variable's data)"
                          : "",
              n, work_us, spin, max_in_flight,
              ordo::usable_cpus());
  // --no-vars: a body that only spins (touching no slot, since nothing orders them).
  auto run_body = [&t, no_vars, spin_only](std::uint64_t* sl, std::uint32_t i) {
    if (no_vars || spin_only) {
      keep(ob::busy_work(i, t.spin_iters));
    } else {
      ob::run_op(t, sl, i);
    }
  };
  std::vector<double> speedups, overheads;
  std::vector<Span> spans(n);
  int failures = 0;
  for (int r = 0; r < runs; ++r) {
    std::vector<std::uint64_t> serial_slots = ob::initial_slots(t.num_vars);
    const std::int64_t s0 = now_ns();
    for (std::uint32_t i = 0; i < n; ++i) run_body(serial_slots.data(), i);
    const double serial_s = static_cast<double>(now_ns() - s0) * 1e-9;

    std::fill(spans.begin(), spans.end(), Span{});
    ordo::Options opts;
    opts.max_in_flight = max_in_flight;
    std::vector<std::uint64_t> slots = ob::initial_slots(t.num_vars);
    double wall_s = 0;
    double pusher_cpu = 0;
    double proc_cpu = 0;
    std::int64_t t0 = 0;
    unsigned workers = 0;
    {
      ordo::Engine engine(opts);
      workers = engine.options().cpu_workers;
      std::vector<ordo::Var> vars;
      vars.reserve(t.num_vars);
      for (std::uint32_t v = 0; v < t.num_vars; ++v) vars.push_back(engine.new_variable());
      std::uint64_t* sl = slots.data();
      Span* sp = spans.data();
      ordo::Var buf[ob::kMaxAccess];
      const double c0 = thread_cpu_s();
      const double p0 = process_cpu_s();
      t0 = now_ns();
      for (std::uint32_t i = 0; i < n; ++i) {
        const std::uint32_t* a = t.acc.data() + t.begin[i];
        const std::uint32_t na = t.begin[i + 1] - t.begin[i];
        const std::uint32_t nr = t.n_reads[i];
        for (std::uint32_t k = 0; k < na; ++k) buf[k] = vars[a[k]];
        engine.push_sync(
            [&run_body, sl, sp, i](ordo::RunContext rc) {
              const std::int64_t b = now_ns();
              run_body(sl, i);
              sp[i] = Span{b, now_ns(), rc.worker};
            },
            ordo::Context::cpu(), std::span<const ordo::Var>(buf, no_vars ? 0 : nr),
            std::span<const ordo::Var>(buf + nr, no_vars ? 0 : na - nr));
      }
      engine.wait_for_all();
      wall_s = static_cast<double>(now_ns() - t0) * 1e-9;
      pusher_cpu = thread_cpu_s() - c0;
      proc_cpu = process_cpu_s() - p0;
    }
    const bool ok = no_vars || spin_only || ob::digest(slots) == ob::digest(serial_slots);
    failures += ok ? 0 : 1;
    const double cores = ordo::usable_cpus();
    double bodies_s = 0;
    for (const Span& s : spans) bodies_s += static_cast<double>(s.end - s.begin) * 1e-9;
    const double overhead_us = (cores * wall_s - bodies_s) / n * 1e6;
    speedups.push_back(serial_s / wall_s);
    overheads.push_back(overhead_us);
    std::printf("run %d: serial %.1f ms, ordo %.1f ms, x%.3f%s; pusher CPU %.1f ms; process CPU %.1f ms; idle cores %.1f ms; "
                "overhead/op %.3f us\n",
                r + 1, serial_s * 1e3, wall_s * 1e3, serial_s / wall_s, ok ? "" : " (RESULT DIFFERS FROM SERIAL)",
                pusher_cpu * 1e3, proc_cpu * 1e3, std::max(0.0, cores * wall_s - proc_cpu) * 1e3, overhead_us);
    {
      // How many bodies ran at once, over the whole run: the cores' time
      // lost is where fewer bodies than cores ran (and where they ran slower).
      std::vector<std::pair<std::int64_t, int>> events;
      events.reserve(2 * spans.size());
      for (const Span& s : spans) {
        if (s.worker == -2) continue;
        events.emplace_back(s.begin, 1);
        events.emplace_back(s.end, -1);
      }
      std::sort(events.begin(), events.end());
      std::vector<double> at(static_cast<std::size_t>(cores) + 2, 0.0);  // ms with k bodies running
      int running = 0;
      std::int64_t last = t0;
      for (const auto& [when, d] : events) {
        const auto k = std::min<std::size_t>(static_cast<std::size_t>(running), at.size() - 1);
        at[k] += static_cast<double>(when - last) * 1e-6;
        running += d;
        last = when;
      }
      const std::int64_t t_end = t0 + static_cast<std::int64_t>(wall_s * 1e9);
      const double tail_ms = static_cast<double>(t_end - last) * 1e-6;
      const double first_ms = events.empty() ? 0 : static_cast<double>(events.front().first - t0) * 1e-6;
      std::printf("  bodies at once:");
      for (std::size_t k = 0; k < at.size(); ++k) {
        std::printf(" %zu%s for %.1f ms%s", k, k + 1 < at.size() ? "" : "+", at[k], k + 1 < at.size() ? "," : "");
      }
      std::printf(" (before the first %.2f ms, after the last %.2f ms)\n", first_ms, tail_ms);
    }
    for (int w = -1; w < static_cast<int>(workers); ++w) {
      std::vector<const Span*> mine;
      for (const Span& s : spans) {
        if (s.worker == w) mine.push_back(&s);
      }
      if (mine.empty()) continue;
      std::sort(mine.begin(), mine.end(), [](const Span* a, const Span* b) { return a->begin < b->begin; });
      std::vector<double> gaps;
      double body = 0;
      double gap_total = 0;
      double long_gaps = 0;
      std::size_t n_long = 0;
      for (std::size_t k = 0; k < mine.size(); ++k) {
        body += static_cast<double>(mine[k]->end - mine[k]->begin) * 1e-6;
        if (k == 0) continue;
        const double g = static_cast<double>(mine[k]->begin - mine[k - 1]->end) * 1e-3;  // us
        gaps.push_back(g);
        gap_total += g * 1e-3;
        if (g > 5) {
          long_gaps += g * 1e-3;
          ++n_long;
        }
      }
      std::printf("  %-8s %6zu ops, first after %7.1f us, bodies %6.1f ms, gaps %5.1f ms (median %.2f us, p90 %.2f, "
                  "p99 %.2f; over 5 us: %zu, %.1f ms)\n",
                  w < 0 ? "pusher" : ("worker " + std::to_string(w)).c_str(), mine.size(),
                  static_cast<double>(mine.front()->begin - t0) * 1e-3, body, gap_total, percentile(gaps, 0.5),
                  percentile(gaps, 0.9), percentile(gaps, 0.99), n_long, long_gaps);
    }
  }
  std::printf("median of %d runs: x%.3f, overhead/op %.3f us\n", runs, percentile(speedups, 0.5),
              percentile(overheads, 0.5));
  return failures == 0 ? 0 : 3;
}
