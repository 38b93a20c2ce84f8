// bench/workloads/main.cpp - ordo_workloads: the dependency-engine workload driver.
//
// Replays the W1..W6 traces (see workload.hpp) on the serial loop, on
// several ordo configurations and on the peers (OpenMP, oneTBB flow graph,
// StarPU: bench/peers/, each its own executable, built when its package is
// installed), verifies every result against the serial one, and prints one
// line per figure:
//
//   RESULT engine=<name> workload=<id> ops_per_s=<median> ok=<0|1> [key=value ...]
//
// With --metg it measures METG instead (metg.hpp): the smallest busy work per
// op at which each engine still reaches 50% parallel efficiency.
//
// Every (engine, workload) figure is measured in a forked child (trace
// generation included; a peer's child execs the peer), so that its peak RSS
// can be read from wait4(). The parent never creates an engine (and so no
// thread) before forking.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ordo/options.hpp"

#include "figure.hpp"
#include "metg.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "workload.hpp"

namespace ob = ordo_bench;

namespace {

constexpr const char* kUsage = R"(usage: ordo_workloads [options]

  --workload W1,W2,...   workloads to run (default: all of W1 W2 W2op W2co W3 W4 W4co W5 W6;
                         peers run W1-W6 only: W2op, W2co, W4co are ways of driving ordo)
  --engines a,b,...      engines (default: all of serial ordo ordo-1w ordo-2w ordo-pooled ordo-inline ordo-graph
                         ordo-naive omp-gomp omp-llvm tbb-flow tbb-flow+build starpu);
                         serial always runs, as the reference; a peer that was not built
                         (package missing) is skipped with a message
  --no-peers             leave the peers out (same as listing only serial and ordo engines)
  --runs N               runs per figure; the median, min and max are reported (default 5)
  --ops N                ops per workload (default 1000000, or 200000 when a peer runs:
                         libgomp's time per task grows with the tasks it holds and StarPU
                         needs ~4 KB per variable; at most 20000000)
  --w6-ops N             ops of W6 (default: --ops / 5)
  --work-us X            busy work per W6 op in microseconds (default 10)
  --quick                CI-size smoke run: --ops 50000 --runs 1 unless given
  --write-docs PATH      also write the Markdown report to PATH
  --callgrind-file PATH  instructions per op from bench/callgrind_per_op.sh's output: an
                         instr/op column in the report and instr_per_op= in RESULT lines
  --no-interleave        do all runs of a figure in one child, one figure after the other
                         (default: run k of every engine of a workload, then run k+1, each in
                         a fresh child, so that load from other processes on a shared machine
                         spreads over all engines instead of spoiling one figure)
  --no-fork              measure in-process (no per-figure peak RSS; for profilers);
                         peers still run in their own process
  --timeout S            give up on a figure after S seconds (default 300)
  --max-in-flight N      set Options::max_in_flight (backpressure) of every ordo engine
                         (default: Options{}.max_in_flight, 4096; 0: unbounded)
  --wait-quiet S         before each figure, wait up to S seconds for the rest of the
                         machine to use less than 0.25 cores, and measure a figure again
                         (at most twice; the quietest attempt is kept) when something else
                         used more than that while it ran (default 0: do neither)
  --help                 this text

METG (Task Bench's measure: the smallest busy work per op at which a run reaches 50% of
the ideal parallel efficiency, ops x work / (workers x wall time)):
  --metg                 sweep the busy work per op instead of the figures above; prints
                         METG_POINT engine= pattern= us= efficiency= ... per point and
                         METG engine= pattern= us= per curve (us=<LO: reached at the
                         smallest point swept; us=>HI: never reached up to the largest)
                         (default --workload W1,W4,W5, --engines ordo,tbb-flow,omp-gomp,omp-llvm,
                         --runs 3, up to 5x that where --ops 100000, the most ops at one
                         point, leaves less busy work than --metg-work-s)
  --metg-range LO:HI[:N] busy work swept, microseconds, N points per decade (default 0.1:1000:2)
  --metg-work-s S        busy work per point, serial seconds (default 0.2 per worker)
  --metg-svg PATH        write the efficiency curves as an SVG plot
  --workers N            threads that run op bodies, on ordo and on every peer
                         (default: the usable CPUs)

Output: one RESULT line per figure on stdout; progress on stderr when it is a terminal.
Exit status: 0 every figure verified (ok=1), 3 some did not, 2 bad usage, 1 other errors.
)";

struct Config {
  std::vector<std::string> workloads;
  std::vector<std::string> engines;
  std::optional<int> runs;
  std::optional<std::size_t> ops;
  std::optional<std::size_t> w6_ops;
  double work_us = 10;
  bool quick = false;
  std::optional<std::string> docs_path;
  bool fork = true;
  double timeout_s = 300;
  std::optional<std::size_t> max_in_flight;  ///< unset: the engine's default
  double wait_quiet_s = 0;
  bool no_peers = false;
  bool interleave = true;
  std::optional<std::string> callgrind_file;
  bool metg = false;
  std::optional<std::string> metg_range;
  double metg_work_s = 0;
  std::optional<std::string> metg_svg;
  std::optional<unsigned> workers;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "ordo_workloads: %s\n\n%s", message.c_str(), kUsage);
  std::exit(2);
}

std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const auto comma = s.find(',');
    const std::string_view item = s.substr(0, comma);
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

template <class T>
T parse_number(const std::string& flag, const std::string& value, bool zero_ok = false) {
  try {
    std::size_t used = 0;
    const double x = std::stod(value, &used);
    if (used != value.size() || x < 0 || (x == 0 && !zero_ok)) throw std::invalid_argument(value);
    return static_cast<T>(x);
  } catch (const std::exception&) {
    usage_error(flag + " needs a " + (zero_ok ? "non-negative" : "positive") + " number, not '" + value + "'");
  }
}

Config parse_args(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::optional<std::string> inline_value;
    if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (flag == "--workload" || flag == "--workloads") {
      c.workloads = split_list(value());
      for (const auto& w : c.workloads) {
        if (!ob::is_workload_id(w)) usage_error("unknown workload '" + w + "'");
      }
    } else if (flag == "--engines" || flag == "--engine") {
      c.engines = split_list(value());
      for (const auto& e : c.engines) {
        if (ob::find_engine(e) == nullptr) usage_error("unknown engine '" + e + "'");
      }
    } else if (flag == "--runs") {
      c.runs = parse_number<int>(flag, value());
    } else if (flag == "--ops") {
      c.ops = parse_number<std::size_t>(flag, value());
    } else if (flag == "--w6-ops") {
      c.w6_ops = parse_number<std::size_t>(flag, value());
    } else if (flag == "--work-us") {
      c.work_us = parse_number<double>(flag, value());
    } else if (flag == "--callgrind-file") {
      c.callgrind_file = value();
    } else if (flag == "--no-interleave") {
      c.interleave = false;
    } else if (flag == "--no-peers") {
      c.no_peers = true;
    } else if (flag == "--quick") {
      c.quick = true;
    } else if (flag == "--write-docs") {
      c.docs_path = value();
    } else if (flag == "--no-fork") {
      c.fork = false;
    } else if (flag == "--timeout") {
      c.timeout_s = parse_number<double>(flag, value());
    } else if (flag == "--wait-quiet") {
      c.wait_quiet_s = parse_number<double>(flag, value(), /*zero_ok=*/true);
    } else if (flag == "--metg") {
      c.metg = true;
    } else if (flag == "--metg-range") {
      c.metg_range = value();
    } else if (flag == "--metg-work-s") {
      c.metg_work_s = parse_number<double>(flag, value());
    } else if (flag == "--metg-svg") {
      c.metg_svg = value();
    } else if (flag == "--workers") {
      c.workers = parse_number<unsigned>(flag, value());
    } else if (flag == "--max-in-flight") {
      c.max_in_flight = parse_number<std::size_t>(flag, value(), /*zero_ok=*/true);
    } else {
      usage_error("unknown option '" + flag + "'");
    }
  }
  if (c.metg) return c;  // its defaults and checks: metg_config()
  if (c.workers || c.metg_range || c.metg_svg || c.metg_work_s > 0) usage_error("--workers and --metg-* need --metg");
  if (c.workloads.empty()) c.workloads.assign(std::begin(ob::kWorkloadIds), std::end(ob::kWorkloadIds));
  if (c.engines.empty()) {
    for (const auto& e : ob::all_engines()) c.engines.push_back(e.name);
  }
  if (c.no_peers) std::erase_if(c.engines, [](const std::string& e) { return ob::find_engine(e)->peer.has_value(); });
  // Keep a typo from exhausting the (shared) machine: a trace costs about
  // 17 bytes per op and the engines several hundred bytes per op in flight.
  constexpr std::size_t kMaxOps = 20'000'000;
  if ((c.ops && *c.ops > kMaxOps) || (c.w6_ops && *c.w6_ops > kMaxOps)) {
    usage_error("at most " + std::to_string(kMaxOps) + " ops per workload");
  }
  if (c.runs && *c.runs > 1000) usage_error("at most 1000 runs");
  if (!c.runs) c.runs = c.quick ? 1 : 5;
  const bool any_peer = std::any_of(c.engines.begin(), c.engines.end(),
                                    [](const std::string& e) {
                                      const ob::EngineSpec* spec = ob::find_engine(e);
                                      return spec->peer && !ob::peer_executable(*spec->peer).empty();
                                    });
  if (!c.ops) c.ops = c.quick ? 50'000 : any_peer ? 200'000 : 1'000'000;
  if (!c.w6_ops) c.w6_ops = std::max<std::size_t>(1, *c.ops / 5);
  return c;
}

/// The METG sweep's settings from the command line, with its own defaults.
ob::MetgConfig metg_config(const Config& c) {
  ob::MetgConfig m;
  m.patterns = c.workloads.empty() ? std::vector<std::string>{"W1", "W4", "W5"} : c.workloads;
  for (const auto& w : m.patterns) {
    if (ob::base_workload(w) != w || w == "W6") usage_error("--metg sweeps W1-W5 (W6 is W4 with busy work), not " + w);
  }
  const std::vector<std::string> engines =
      c.engines.empty() ? std::vector<std::string>{"ordo", "tbb-flow", "omp-gomp", "omp-llvm"} : c.engines;
  for (const auto& name : engines) {
    const ob::EngineSpec* e = ob::find_engine(name);
    if (name == "serial") continue;  // always run, as the reference
    if (e->peer && (c.no_peers || ob::peer_executable(*e->peer).empty())) {
      if (!c.no_peers) {
        std::fprintf(stderr, "peer %s skipped: %s not installed (%s not built next to ordo_workloads)\n",
                     name.c_str(), e->peer->package.c_str(), e->peer->executable.c_str());
      }
      continue;
    }
    if (e->ordo && e->ordo->cpu_workers != 0) usage_error("--metg sets the worker count; " + name + " fixes its own");
    m.engines.push_back(e);
  }
  if (m.engines.empty()) usage_error("--metg: no engine to measure");
  if (c.metg_range) {
    double lo = 0, hi = 0;
    int per_decade = m.per_decade;
    const int n = std::sscanf(c.metg_range->c_str(), "%lf:%lf:%d", &lo, &hi, &per_decade);
    if (n < 2 || !(lo > 0) || hi < lo || per_decade < 1 || per_decade > 100) {
      usage_error("--metg-range needs LO:HI[:N] with 0 < LO <= HI and 1 <= N <= 100, not '" + *c.metg_range + "'");
    }
    m.lo_us = lo;
    m.hi_us = hi;
    m.per_decade = per_decade;
  }
  m.work_s = c.metg_work_s;
  if (c.ops) m.max_ops = std::min<std::size_t>(*c.ops, 20'000'000);
  m.workers = c.workers.value_or(ordo::usable_cpus());
  if (m.workers == 0 || m.workers > 1024) usage_error("--workers needs 1 to 1024");
  if (c.runs) m.runs = std::min(*c.runs, 1000);
  m.timeout_s = c.timeout_s;
  m.wait_quiet_s = c.wait_quiet_s;
  m.svg_path = c.metg_svg;
  return m;
}

std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i > 0) s += ' ';
    s += arg.find_first_of(" \t\"'") == std::string::npos ? arg : "'" + arg + "'";
  }
  return s;
}

std::string local_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M %Z", &tm);
  return buf;
}

/// Measures one (engine, workload) figure: in a forked child, or in-process
/// on `shared` (the workload's trace) with --no-fork. With --wait-quiet, a
/// figure disturbed by other processes is measured again (the quietest kept).
ob::Figure run_figure(const ob::Job& job, const Config& cfg, const ob::Progress& progress, const ob::Trace* shared) {
  if (!cfg.fork && !job.engine.peer) {
    return ob::Figure{.engine = job.engine.name, .workload = job.workload, .m = ob::measure_here(job, progress, shared)};
  }
  const std::string label = job.workload + " " + job.engine.name;
  ob::Figure best;
  const int max_attempts = cfg.wait_quiet_s > 0 ? 3 : 1;
  int attempt = 1;
  for (;; ++attempt) {
    if (cfg.wait_quiet_s > 0) ob::wait_until_quiet(cfg.wait_quiet_s, progress, label);
    progress.show(label + (attempt > 1 ? ": measuring again (the machine was busy)" : ": starting"));
    ob::Figure fig = ob::measure_in_child(job, progress, cfg.timeout_s);
    if (attempt == 1 || fig.other_load.value_or(0) < best.other_load.value_or(0)) best = std::move(fig);
    if (best.other_load.value_or(0) < ob::kQuietLoad || attempt == max_attempts) break;
  }
  best.attempts = attempt;
  return best;
}

/// Adds one interleaved run (a figure of one run) to the figure of all runs.
void merge_run(ob::Figure& into, ob::Figure&& run, std::vector<double>& loads, std::vector<double>& untimed,
               std::vector<double>& newvar) {
  if (into.engine.empty()) {  // the first run
    into = std::move(run);
  } else {
    into.m.seconds.insert(into.m.seconds.end(), run.m.seconds.begin(), run.m.seconds.end());
    into.m.split_seconds.insert(into.m.split_seconds.end(), run.m.split_seconds.begin(), run.m.split_seconds.end());
    if (into.m.ops == 0) into.m.ops = run.m.ops;
    if (into.m.workers == 0) into.m.workers = run.m.workers;
    if (!run.m.ok) {
      into.m.ok = false;
      if (into.m.error.empty()) into.m.error = run.m.error.empty() ? "digest_mismatch" : run.m.error;
    }
    if (run.peak_rss_mib) into.peak_rss_mib = std::max(into.peak_rss_mib.value_or(0), *run.peak_rss_mib);
    into.attempts = std::max(into.attempts, run.attempts);
  }
  if (run.other_load) loads.push_back(*run.other_load);
  untimed.push_back(run.m.untimed_seconds);
  newvar.push_back(run.m.new_variable_ns);
  double sum = 0;
  for (const double l : loads) sum += l;
  if (!loads.empty()) into.other_load = sum / static_cast<double>(loads.size());
  into.m.untimed_seconds = ob::median(untimed);
  into.m.new_variable_ns = ob::median(newvar);
}

int run(int argc, char** argv) {
  const Config cfg = parse_args(argc, argv);
  ob::Progress progress;
  if (cfg.metg) return ob::run_metg(metg_config(cfg), progress);

  ob::RunInfo info;
  info.command = command_line(argc, argv);
  info.started = local_date();
  info.runs = *cfg.runs;
  info.ops = *cfg.ops;
  info.w6_ops = *cfg.w6_ops;
  info.work_us = cfg.work_us;
  info.forked = cfg.fork;
  info.max_in_flight = cfg.max_in_flight.value_or(ordo::Options{}.max_in_flight);
  info.max_in_flight_given = cfg.max_in_flight.has_value();
  info.load_before = ob::load_average();
  if (cfg.callgrind_file) ob::read_callgrind_file(*cfg.callgrind_file, info);

  // serial first: it provides the reference digest for the other engines.
  std::vector<const ob::EngineSpec*> engines{ob::find_engine("serial")};
  for (const auto& name : cfg.engines) {
    if (name == "serial") continue;
    const ob::EngineSpec* e = ob::find_engine(name);
    if (e->peer && ob::peer_executable(*e->peer).empty()) {
      std::fprintf(stderr, "peer %s skipped: %s not installed (%s not built next to ordo_workloads)\n", name.c_str(),
                   e->peer->package.c_str(), e->peer->executable.c_str());
      info.skipped_peers.push_back(name + " (" + e->peer->package + " not installed)");
      continue;
    }
    engines.push_back(e);
  }
  const bool print_serial = std::find(cfg.engines.begin(), cfg.engines.end(), "serial") != cfg.engines.end();
  auto runs_on = [](const ob::EngineSpec& e, const std::string& workload) {
    return !e.peer || ob::base_workload(workload) == workload;
  };
  // Interleaved: every child does one run; rounds of all engines of a workload.
  const int rounds = cfg.fork && cfg.interleave ? *cfg.runs : 1;
  info.interleaved = rounds > 1;
  int total = 0;
  for (const auto& w : cfg.workloads) {
    for (const ob::EngineSpec* e : engines) total += runs_on(*e, w) ? rounds : 0;
  }
  progress.set_total(total);

  // Calibrated once, here, so that the serial loop and every engine spin alike.
  const bool has_w6 = std::find(cfg.workloads.begin(), cfg.workloads.end(), "W6") != cfg.workloads.end();
  if (has_w6) {
    progress.show("calibrating the W6 busy work");
    info.spin_iters = ob::calibrate_spin(cfg.work_us);
  }

  std::vector<ob::Figure> figures;
  bool all_ok = true;
  for (const std::string& workload : cfg.workloads) {
    const std::size_t ops = workload == "W6" ? *cfg.w6_ops : *cfg.ops;
    const std::uint32_t spin = workload == "W6" ? info.spin_iters : 0;  // only W6 has busy work here
    std::optional<std::uint64_t> reference;
    std::optional<std::size_t> serial_index;  // into `figures`
    // In-process runs share one trace per workload (so that a profile of
    // serial+engine minus serial alone leaves exactly the engine's replay).
    std::optional<ob::Trace> shared_trace;
    if (!cfg.fork) {
      progress.show(workload + ": generating the trace");
      shared_trace.emplace(ob::make_trace(workload, ops, spin));
    }
    std::vector<const ob::EngineSpec*> here;
    for (const ob::EngineSpec* engine : engines) {
      if (runs_on(*engine, workload)) here.push_back(engine);
    }
    std::vector<ob::Figure> wf(here.size());
    std::vector<std::vector<double>> loads(here.size()), untimed(here.size()), newvar(here.size());
    for (int round = 1; round <= rounds; ++round) {
      for (std::size_t k = 0; k < here.size(); ++k) {
        const ob::EngineSpec* engine = here[k];
        progress.next_figure();
        ob::Job job{*engine, workload, ops, spin, rounds > 1 ? 1 : *cfg.runs, reference};
        if (rounds > 1) {
          job.round = round;
          job.rounds = rounds;
        }
        if (job.engine.ordo && cfg.max_in_flight) job.engine.ordo->max_in_flight = *cfg.max_in_flight;
        ob::Figure fig = run_figure(job, cfg, progress, shared_trace ? &*shared_trace : nullptr);
        if (engine->name == "serial" && round == 1 && fig.m.ok) reference = fig.m.digest;
        merge_run(wf[k], std::move(fig), loads[k], untimed[k], newvar[k]);
      }
    }
    for (std::size_t k = 0; k < here.size(); ++k) {
      const bool is_serial = here[k]->name == "serial";
      ob::Figure& fig = wf[k];
      if (is_serial) {
        serial_index = figures.size();
      } else if (!reference) {
        fig.m.ok = false;
        if (fig.m.error.empty()) fig.m.error = "no_serial_reference";
      }
      figures.push_back(std::move(fig));
      if (!is_serial || print_serial) {
        const ob::Figure& f = figures.back();
        all_ok = all_ok && f.m.ok;
        progress.clear();
        const ob::Figure* serial = serial_index && !is_serial ? &figures[*serial_index] : nullptr;
        std::printf("%s\n", ob::result_line(f, serial, info).c_str());
        std::fflush(stdout);
      }
    }
  }
  progress.clear();

  info.load_after = ob::load_average();
  info.total_seconds = progress.elapsed_s();
  if (cfg.docs_path) {
    try {
      ob::write_docs(*cfg.docs_path, figures, info);
      std::fprintf(stderr, "ordo_workloads: wrote %s\n", cfg.docs_path->c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ordo_workloads: %s\n", e.what());
      return 1;
    }
  }
  return all_ok ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ordo_workloads: %s\n", e.what());
    return 1;
  }
}
