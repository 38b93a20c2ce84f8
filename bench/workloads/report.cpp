// bench/workloads/report.cpp - RESULT lines and the Markdown report.
#include "report.hpp"

#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

#include <ordo/options.hpp>

namespace ordo_bench {

namespace {

constexpr std::string_view kNotesMarker = "<!-- notes: everything below this line is kept by --write-docs -->";

std::string fmt(const char* format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

const Figure* find_figure(const std::vector<Figure>& figures, std::string_view engine, std::string_view workload) {
  for (const Figure& f : figures) {
    if (f.engine == engine && f.workload == workload) return &f;
  }
  return nullptr;
}

bool is_peer(std::string_view engine) {
  const EngineSpec* e = find_engine(engine);
  return e != nullptr && e->peer.has_value();
}

/// The fastest verified peer figure of `workload`'s base workload (peers run
/// W2 for W2op/W2co and W4 for W4co), or nullptr if no peer ran.
const Figure* best_peer(const std::vector<Figure>& figures, std::string_view workload) {
  const std::string_view base = base_workload(workload);
  const Figure* best = nullptr;
  for (const Figure& f : figures) {
    if (f.workload != base || !is_peer(f.engine) || !f.m.ok || f.m.seconds.empty()) continue;
    if (best == nullptr || ops_per_second(f.m).median > ops_per_second(best->m).median) best = &f;
  }
  return best;
}

std::optional<double> ratio_to(const Figure& f, const Figure* other) {
  if (other == nullptr || other->m.seconds.empty() || f.m.seconds.empty()) return std::nullopt;
  const double base = ops_per_second(other->m).median;
  if (base <= 0) return std::nullopt;
  return ops_per_second(f.m).median / base;
}

std::optional<double> ratio_to_serial(const Figure& f, const Figure* serial) {
  if (serial == nullptr || serial == &f || serial->m.seconds.empty() || f.m.seconds.empty()) return std::nullopt;
  const double base = ops_per_second(serial->m).median;
  if (base <= 0) return std::nullopt;
  return ops_per_second(f.m).median / base;
}

/// The serial figure of a workload with busy work (W6): the speedup the
/// machine gave that work split over one plain thread per core with no
/// dependencies (Measurement::split_seconds), as median, min and max of the
/// runs (each run's serial loop and split are timed back to back).
struct Ceiling {
  double median, min, max;
};
std::optional<Ceiling> split_ceiling(const Figure* serial) {
  if (serial == nullptr) return std::nullopt;
  const auto& sec = serial->m.seconds;
  const auto& split = serial->m.split_seconds;
  std::vector<double> r;
  for (std::size_t i = 0; i < std::min(sec.size(), split.size()); ++i) {
    if (split[i] > 0) r.push_back(sec[i] / split[i]);
  }
  if (r.empty()) return std::nullopt;
  return Ceiling{median(r), *std::min_element(r.begin(), r.end()), *std::max_element(r.begin(), r.end())};
}

std::string first_line_of(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return "?";
  return line;
}

}  // namespace

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

namespace {

std::string mem_total() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemTotal:", 0) == 0) {
      std::istringstream fields(line.substr(9));
      double kib = 0;
      fields >> kib;
      return fmt("%.1f GiB", kib / (1024.0 * 1024.0));
    }
  }
  return "unknown";
}

std::string kernel() {
  utsname u{};
  if (uname(&u) != 0) return "unknown";
  return std::string(u.sysname) + " " + u.release + " " + u.machine;
}

/// Output of a shell command (first 4 KiB, trailing newline removed), "" on failure.
std::string shell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {};
  char buf[4096];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, pipe);
  pclose(pipe);
  std::string out(buf, n);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

/// The git revision of the measured sources, and which engine files differ from it.
std::string source_revision() {
#ifdef ORDO_SOURCE_DIR
  const std::string git = std::string("git -C '") + ORDO_SOURCE_DIR + "' ";
  const std::string rev = shell(git + "rev-parse --short HEAD 2>/dev/null");
  if (rev.empty()) return "unknown (not a git checkout)";
  std::string dirty = shell(git + "status --porcelain --untracked-files=no -- include src CMakeLists.txt 2>/dev/null");
  if (dirty.empty()) return "git " + rev + " (engine sources clean)";
  std::string files;
  std::istringstream lines(dirty);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > 3) files += (files.empty() ? "" : ", ") + line.substr(3);
  }
  return "git " + rev + " plus uncommitted changes to " + files;
#else
  return "unknown";
#endif
}

namespace {

std::string mops(double ops_per_s) { return fmt("%.2f", ops_per_s / 1e6); }

/// Targets of issue 30: the default engine against tbb-flow (graph prebuilt,
/// timed on execution only) in the same run, as a ratio (W6: of the
/// speedups over the serial loop); the coroutine variants against their
/// push_sync base.
struct Target {
  std::string_view workload;
  std::string_view against;  ///< "tbb-flow", or the ordo workload it is compared with
  double goal;               ///< ordo / against, at least
};
constexpr Target kTargets[] = {
    {"W1", "tbb-flow", 3.5}, {"W2", "tbb-flow", 2.0}, {"W3", "tbb-flow", 1.5},  {"W4", "tbb-flow", 1.5},
    {"W5", "tbb-flow", 2.2}, {"W6", "tbb-flow", 1.03}, {"W2co", "W2", 0.5},      {"W4co", "W4", 0.5},
};
constexpr double kW4RssGoalMib = 64;
constexpr double kW6CeilingGoal = 0.96;

void write_targets(std::ostream& out, const std::vector<Figure>& figures, std::vector<std::string>& misses) {
  out << "## ordo against the targets\n\n"
         "Issue 30's targets: `ordo` (the default engine, `ordo::Options{}`, which never runs an op on its "
         "pusher) against `tbb-flow` (its graph built before timing) in this run, as a ratio of M ops/s (W6: "
         "of the speedups over the serial loop); W2co and W4co against ordo's own W2 and W4. \"best "
         "variant\" is the fastest ordo configuration (`ordo-inline` pushes every op with "
         "`OpAttrs::inline_ok`; `ordo-naive` runs every op inline, no parallelism).\n\n"
         "| workload | compared with | its figure | ordo | ratio | target | best variant | target met? |\n"
         "|---|---|---:|---:|---:|---:|---|:-:|\n";
  auto value = [&](const Figure& f) -> std::optional<double> {
    if (f.m.seconds.empty() || !f.m.ok) return std::nullopt;
    if (f.workload == "W6") return ratio_to_serial(f, find_figure(figures, "serial", "W6"));
    return std::optional(ops_per_second(f.m).median / 1e6);
  };
  auto show = [](const std::string& workload, std::optional<double> v) {
    if (!v) return std::string("failed");
    return workload == "W6" ? fmt("%.2fx", *v) : fmt("%.2f", *v);
  };
  for (const Target& t : kTargets) {
    const std::string w(t.workload);
    const Figure* ordo = find_figure(figures, "ordo", t.workload);
    if (ordo == nullptr) continue;
    const bool vs_peer = t.against == "tbb-flow";
    const std::string base_workload = vs_peer ? w : std::string(t.against);
    const Figure* base = vs_peer ? find_figure(figures, "tbb-flow", t.workload)
                                 : find_figure(figures, "ordo", t.against);
    const auto mine = value(*ordo);
    const auto theirs = base != nullptr ? value(*base) : std::nullopt;
    const Figure* best = nullptr;
    std::optional<double> best_value;
    for (const Figure& f : figures) {
      if (f.workload != t.workload || f.engine.rfind("ordo", 0) != 0) continue;
      const auto v = value(f);
      if (v && (!best_value || *v > *best_value)) {
        best = &f;
        best_value = v;
      }
    }
    std::optional<double> r;
    if (mine && theirs && *theirs > 0) r = *mine / *theirs;
    const bool met = r && *r >= t.goal;
    const std::string against = vs_peer ? std::string("tbb-flow") : "ordo on " + std::string(t.against);
    out << "| " << w << " | " << against << " | " << (base != nullptr ? show(base_workload, theirs) : "not run")
        << " | " << show(w, mine) << " | " << (r ? fmt("%.2f", *r) : std::string("-")) << " | "
        << fmt(">= %.2f", t.goal) << " | "
        << (best != nullptr ? show(w, best_value) + " (" + best->engine + ")" : std::string("-")) << " | "
        << (r ? (met ? "yes" : "**no**") : "-") << " |\n";
    if (r && !met) misses.push_back(w + ": " + fmt("%.2f", *r) + " of " + against + " vs >= " + fmt("%.2f", t.goal));
  }
  if (const Figure* w4 = find_figure(figures, "ordo", "W4"); w4 != nullptr && w4->peak_rss_mib) {
    const bool met = *w4->peak_rss_mib <= kW4RssGoalMib;
    out << "| W4 peak RSS | - | - | " << fmt("%.1f MiB", *w4->peak_rss_mib) << " | - | <= 64 MiB | - | "
        << (met ? "yes" : "**no**") << " |\n";
    if (!met) misses.push_back("W4 peak RSS: " + fmt("%.1f MiB", *w4->peak_rss_mib) + " vs <= 64 MiB");
  }
  out << "\n";
  const Figure* w6_serial = find_figure(figures, "serial", "W6");
  const Figure* w6_ordo = find_figure(figures, "ordo", "W6");
  if (const auto c = split_ceiling(w6_serial); c && w6_ordo != nullptr) {
    const auto mine = ratio_to_serial(*w6_ordo, w6_serial);
    out << "W6's ceiling on this machine in this run: the same busy work split evenly over "
        << w6_ordo->m.workers << " plain threads, with no dependencies and no engine, ran "
        << fmt("%.2fx", c->median) << " the serial loop (median of the runs; " << fmt("%.2f", c->min) << " - "
        << fmt("%.2f", c->max) << ")";
    if (mine) {
      const double share = *mine / c->median;
      out << "; `ordo` reached " << fmt("%.0f%%", 100 * share) << " of it (target >= "
          << fmt("%.0f%%", 100 * kW6CeilingGoal) << ")";
      if (share < kW6CeilingGoal) misses.push_back("W6: " + fmt("%.0f%%", 100 * share) + " of the split ceiling");
    }
    out << ".\n\n";
  }
}

/// ordo against every peer, per workload, measured in this run; and where
/// ordo is not ahead of every peer.
void write_peer_summary(std::ostream& out, const std::vector<Figure>& figures, const RunInfo& info) {
  std::vector<std::string> peers;  // in report order, those with a figure
  for (const EngineSpec& e : all_engines()) {
    if (!e.peer) continue;
    for (const Figure& f : figures) {
      if (f.engine == e.name) {
        peers.push_back(e.name);
        break;
      }
    }
  }
  out << "## ordo against the peers (this run)\n\n";
  if (peers.empty()) {
    out << "No peer ran in this run";
    if (!info.skipped_peers.empty()) out << " (skipped: ";
    for (std::size_t i = 0; i < info.skipped_peers.size(); ++i) out << (i ? ", " : "") << info.skipped_peers[i];
    if (!info.skipped_peers.empty()) out << ")";
    out << ".\n\n";
    return;
  }
  out << "M ops/s, median of the runs, same machine, same traces, same op body, every result verified against "
         "the serial loop (a failed figure shows as failed). `ordo` is the default engine; \"best ordo\" the "
         "fastest ordo configuration (ordo-naive runs ops inline on the pusher: no parallelism). Peers run the "
         "base trace of a variant (W2 for W2op and W2co, W4 for W4co). Last column: `ordo` / best peer "
         "(> 1: ordo ahead).\n\n";
  out << "| workload | serial | ordo | best ordo |";
  for (const auto& p : peers) out << " " << p << " |";
  out << " best peer | ordo / best peer |\n|---|---:|---:|---|";
  for (std::size_t i = 0; i < peers.size(); ++i) out << "---:|";
  out << "---|---:|\n";
  auto cell = [&](const Figure* f) -> std::string {
    if (f == nullptr) return "-";
    if (!f->m.ok || f->m.seconds.empty()) return "failed";
    return mops(ops_per_second(f->m).median);
  };
  std::vector<std::string> behind;
  for (const std::string_view w : kWorkloadIds) {
    const Figure* ordo = find_figure(figures, "ordo", w);
    if (ordo == nullptr) continue;
    const Figure* best_ordo = nullptr;
    for (const Figure& f : figures) {
      if (f.workload != w || f.engine.rfind("ordo", 0) != 0 || !f.m.ok || f.m.seconds.empty()) continue;
      if (best_ordo == nullptr || ops_per_second(f.m).median > ops_per_second(best_ordo->m).median) best_ordo = &f;
    }
    const Figure* peer = best_peer(figures, w);
    out << "| " << w << " | " << cell(find_figure(figures, "serial", w)) << " | " << cell(ordo) << " | "
        << (best_ordo ? cell(best_ordo) + " (" + best_ordo->engine + ")" : std::string("-")) << " |";
    for (const auto& p : peers) out << " " << cell(find_figure(figures, p, base_workload(w))) << " |";
    const double r = ordo->m.ok ? ratio_to(*ordo, peer).value_or(-1) : -1;  // -1: no ratio
    out << " " << (peer ? peer->engine : std::string("-")) << " | "
        << (r < 0 ? std::string("-") : r < 1 ? "**" + fmt("%.2f", r) + "**" : fmt("%.2f", r)) << " |\n";
    if (r >= 0 && r < 1) {
      std::string who;
      for (const auto& p : peers) {
        const Figure* f = find_figure(figures, p, base_workload(w));
        if (f != nullptr && f->m.ok && ratio_to(*ordo, f).value_or(2) < 1) {
          who += (who.empty() ? "" : ", ") + p + " " + cell(f);
        }
      }
      behind.push_back(std::string(w) + ": ordo " + cell(ordo) + " M ops/s is behind " + who);
    }
  }
  out << "\n";
  if (!info.skipped_peers.empty()) {
    out << "Peers skipped in this run: ";
    for (std::size_t i = 0; i < info.skipped_peers.size(); ++i) out << (i ? ", " : "") << info.skipped_peers[i];
    out << ".\n\n";
  }
  if (behind.empty()) {
    out << "ordo (the default engine) is ahead of every peer on every workload of this run.\n\n";
  } else {
    out << "**Where ordo is not ahead of every peer** (why: see the notes at the end):\n\n";
    for (const auto& b : behind) out << "- " << b << "\n";
    out << "\n";
  }
}

void write_workload_table(std::ostream& out, const std::vector<Figure>& figures, std::string_view workload,
                          const RunInfo& info) {
  const Figure* serial = find_figure(figures, "serial", workload);
  bool any = false;
  for (const Figure& f : figures) any = any || f.workload == workload;
  if (!any) return;
  out << "### " << workload << ": " << describe_workload(workload) << "\n\n";
  for (const Figure& f : figures) {
    if (f.workload == workload) {
      out << f.m.ops << " ops per run";
      if (workload == "W6") out << fmt(", %.0f us of busy work per op", info.work_us);
      out << ".\n\n";
      break;
    }
  }
  const Figure* peer = best_peer(figures, workload);
  if (peer != nullptr && base_workload(workload) != workload) {
    out << "Peers run the " << base_workload(workload) << " trace (this variant only changes how ordo is driven); "
        << "\"x best peer\" compares with the best of them there (`" << peer->engine << "`).\n\n";
  }
  out << "| engine | M ops/s (median) | min - max | x serial | x best peer | peak RSS (MiB) | instr/op | other load | ok |\n"
         "|---|---:|---:|---:|---:|---:|---:|---:|:-:|\n";
  auto row = [&](const Figure& f) {
    out << "| " << (f.workload == workload ? f.engine : f.engine + " (" + f.workload + ")") << " | ";
    if (f.m.seconds.empty()) {
      out << "- | - | - | - | ";
    } else {
      const Stats s = ops_per_second(f.m);
      const auto ratio = ratio_to_serial(f, serial);
      const auto vs_peer = ratio_to(f, peer);
      out << mops(s.median) << " | " << mops(s.min) << " - " << mops(s.max) << " | "
          << (ratio ? fmt("%.2f", *ratio) : std::string(&f == serial ? "1.00" : "-")) << " | "
          << (vs_peer ? fmt("%.2f", *vs_peer) : std::string("-")) << " | ";
    }
    const auto instr = info.instr_per_op.find({f.workload, f.engine});
    out << (f.peak_rss_mib ? fmt("%.1f", *f.peak_rss_mib) : std::string("-")) << " | "
        << (instr != info.instr_per_op.end() ? fmt("%.0f", instr->second) : std::string("-")) << " | "
        << (f.other_load ? fmt("%.2f", *f.other_load) : std::string("-")) << " | "
        << (f.m.ok ? "1" : "**0** (" + f.m.error + ")") << " |\n";
  };
  for (const Figure& f : figures) {
    if (f.workload == workload) row(f);
  }
  std::string build_note;
  for (const Figure& f : figures) {
    if (f.workload == workload && f.m.untimed_seconds > 0) {
      build_note += (build_note.empty() ? "" : ", ") + ("`" + f.engine + "` " +
                    fmt("%.3f s", f.m.untimed_seconds) + " (" +
                    mops(static_cast<double>(f.m.ops) / f.m.untimed_seconds) + " M ops/s)");
    }
  }
  if (!build_note.empty()) {
    out << "\nGraph construction (median; outside `tbb-flow`'s timed region, inside `tbb-flow+build`'s): "
        << build_note << ".\n";
  }
  if (workload == "W1") {
    if (const Figure* f = find_figure(figures, "ordo", "W1"); f != nullptr && f->m.new_variable_ns > 0) {
      out << "\nVariable creation (not in the timed region): `Engine::new_variable` took "
          << fmt("%.1f", f->m.new_variable_ns) << " ns per variable for `ordo` ("
          << fmt("%.2f", f->m.new_variable_ns * static_cast<double>(f->m.ops) / 1e6)
          << " ms for the W1 variables).\n";
    }
  }
  out << "\n";
}

std::string kept_notes(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string old = buf.str();
  const auto at = old.find(kNotesMarker);
  return at == std::string::npos ? std::string() : old.substr(at);
}

}  // namespace

Stats ops_per_second(const Measurement& m) {
  std::vector<double> v;
  for (const double s : m.seconds) v.push_back(s > 0 ? static_cast<double>(m.ops) / s : 0.0);
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const std::size_t mid = v.size() / 2;
  const double median = v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  return {median, v.front(), v.back()};
}

std::string result_line(const Figure& f, const Figure* serial, const RunInfo& info) {
  const Stats s = ops_per_second(f.m);
  std::ostringstream out;
  out << "RESULT engine=" << f.engine << " workload=" << f.workload << " ops_per_s=" << fmt("%.0f", s.median)
      << " ok=" << (f.m.ok ? 1 : 0) << " ops=" << f.m.ops << " median_of=" << f.m.seconds.size()
      << " min=" << fmt("%.0f", s.min) << " max=" << fmt("%.0f", s.max);
  if (const auto r = ratio_to_serial(f, serial)) out << " vs_serial=" << fmt("%.3f", *r);
  if (f.peak_rss_mib) out << " peak_rss_mib=" << fmt("%.1f", *f.peak_rss_mib);
  if (f.other_load) out << " other_load=" << fmt("%.2f", *f.other_load);
  if (f.attempts > 1) out << " attempts=" << f.attempts;
  if (f.engine != "serial") out << " workers=" << f.m.workers;  // 0: naive, ops run inline
  if (f.workload == "W1" && f.m.new_variable_ns > 0) out << " new_variable_ns=" << fmt("%.1f", f.m.new_variable_ns);
  if (f.workload == "W6") out << " work_us=" << fmt("%g", info.work_us) << " spin_iters=" << info.spin_iters;
  if (f.engine == "serial") {
    if (const auto c = split_ceiling(&f)) out << " split_speedup=" << fmt("%.3f", c->median);
  } else if (const auto c = split_ceiling(serial)) {
    // W6 against what the machine gave the same work with no engine in this
    // run: steadier than vs_serial on a shared host, where both move together.
    if (const auto r = ratio_to_serial(f, serial)) out << " of_split=" << fmt("%.3f", *r / c->median);
  }
  if (f.engine.rfind("ordo", 0) == 0 && info.max_in_flight > 0) out << " max_in_flight=" << info.max_in_flight;
  if (const auto it = info.instr_per_op.find({f.workload, f.engine}); it != info.instr_per_op.end()) {
    out << " instr_per_op=" << fmt("%.0f", it->second);
  }
  if (f.m.untimed_seconds > 0) out << " build_s=" << fmt("%.4f", f.m.untimed_seconds);
  if (!f.m.error.empty()) out << " error=" << f.m.error;
  return out.str();
}

void read_callgrind_file(const std::string& path, RunInfo& info) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  info.instr_source = path;
  std::size_t ordo_ops = 0, peer_ops = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string workload, engine;
    double ops = 0, total = 0, serial = 0, per_op = 0;
    if (!(fields >> workload >> engine >> ops >> total >> serial >> per_op) || !is_workload_id(workload)) continue;
    info.instr_per_op[{workload, engine}] = per_op;
    (engine.rfind("ordo", 0) == 0 ? ordo_ops : peer_ops) = static_cast<std::size_t>(ops);
  }
  if (ordo_ops != 0) info.instr_ops = std::to_string(ordo_ops) + "-op runs (ordo)";
  if (peer_ops != 0) info.instr_ops += (ordo_ops ? ", " : "") + std::to_string(peer_ops) + "-op runs (peers)";
}

std::string load_average() {
  const std::string line = first_line_of("/proc/loadavg");
  // "0.52 0.58 0.59 1/123 4567": keep the three averages.
  std::istringstream in(line);
  std::string a, b, c;
  in >> a >> b >> c;
  return c.empty() ? line : a + " " + b + " " + c;
}

void write_docs(const std::string& path, const std::vector<Figure>& figures, const RunInfo& info) {
  const std::string notes = kept_notes(path);
  std::ostringstream out;
  out << "# ordo benchmarks: dependency-engine workloads\n\n"
         "Generated by `ordo_workloads --write-docs` (bench/workloads/). Regenerate with the command below; "
         "hand-written notes after the notes marker at the end are kept.\n\n";

  out << "## Run\n\n"
      << "- date: " << info.started << "\n"
      << "- machine: " << std::thread::hardware_concurrency() << " hardware threads, " << ordo::usable_cpus()
      << " usable by this process (affinity), CPU: " << cpu_model()
      << ", memory: " << mem_total() << ", " << kernel() << "\n"
      << "- compiler: GCC-compatible " << __VERSION__
#ifdef NDEBUG
      << ", NDEBUG (Release)"
#else
      << ", assertions on (not a Release build: figures are not representative)"
#endif
      << "\n"
      << "- command: `" << info.command << "`\n"
      << "- sources: " << source_revision() << "\n"
      << "- " << info.runs << " run(s) per figure; " << info.ops << " ops per workload (W3 and W5 round to whole "
      << "rounds / a square grid), W6: " << info.w6_ops << " ops x " << fmt("%g", info.work_us)
      << " us of busy work (" << info.spin_iters << " hash steps, calibrated)\n"
      << "- every ordo engine ran with Options::max_in_flight = " << info.max_in_flight
      << (info.max_in_flight_given ? " (--max-in-flight)" : " (the default)") << "\n"
      << "- load average (1/5/15 min) before: " << info.load_before << ", after: " << info.load_after
      << "; total wall time " << fmt("%.0f", info.total_seconds) << " s\n\n";

  write_peer_summary(out, figures, info);

  std::vector<std::string> misses;
  write_targets(out, figures, misses);
  if (misses.empty()) {
    out << "ordo meets every target measured in this run.\n\n";
  } else {
    out << "**ordo misses " << misses.size() << " target(s) in this run:**\n\n";
    for (const std::string& m : misses) out << "- " << m << "\n";
    out << "\n";
  }

  out << "## Figures per workload\n\n"
         "M ops/s is the median over the runs of ops / (time from the first push to `wait_for_all()` "
         "returning); min - max are the slowest and fastest run. \"x serial\" divides the median by the serial "
         "loop's. Peak RSS is `ru_maxrss` of the child process that generated the trace and did the run(s) "
         "of that figure (one fresh engine per run; the largest over the children when runs are interleaved); "
         "the serial row is the harness's own baseline (trace + "
         "slots), so an engine's memory is its row minus the serial row. \"Other load\" is the CPU time that "
         "the rest of the machine used while the figure ran, divided by its wall time (in cores; this machine "
         "is shared, so a figure with a high other load was slowed down by something else). ok = 1: the final slots of every "
         "run matched the serial loop's (64-bit digest of all slots). \"instr/op\": instructions per op counted by "
         "callgrind (`bench/callgrind_per_op.sh`: a run of the engine minus a run of the serial loop alone, over "
         "the ops; engine creation, push, dependency tracking, dispatch, body, completion, idle workers' "
         "spinning under valgrind's serialised threads), immune to timing noise; \"-\" where not profiled"
      << (info.instr_source.empty() ? std::string(" (no profile given in this run: --callgrind-file)")
                                    : " (" + info.instr_ops + "; peers: `bench/callgrind_peers.sh`, one replay = "
                                          "2 runs minus 1 run, OpenMP with OMP_WAIT_POLICY=passive)")
      << ".\n\n"
         "Engines: ";
  bool first = true;
  for (const EngineSpec& e : all_engines()) {
    out << (first ? "" : "; ") << "`" << e.name << "`: " << e.description;
    first = false;
  }
  out << ".\n\n";
  for (const std::string_view w : kWorkloadIds) write_workload_table(out, figures, w, info);

  out << "## Method\n\n"
         "- Every op body applies `h = mix(op index, slots of its reads)`, then `slot = mix(slot, h)` for each "
         "variable it writes (`mix`: splitmix64 finaliser of `a * golden + b`, not commutative). The serial "
         "engine runs the same body over the same trace in a plain loop; any reordering of conflicting ops, "
         "a lost op or a doubled op changes the digest of the final slots (reported as ok=0).\n"
         "- Traces are generated before timing (vectors of variable indices; W4/W6 from splitmix64 with a "
         "fixed seed); variables are created before timing too (for W1 their creation is timed separately "
         "and shown under the W1 table). Ad-hoc workloads push `push_sync` lambdas of 24 bytes (stored "
         "inline, no allocation); W2op pushes one pre-built `Operator`.\n"
         << (info.interleaved
                 ? "- Runs are interleaved: run k of every engine of a workload, then run k+1, each run in its own "
                   "forked child (fresh process, trace generated there), so that load from other processes on "
                   "a shared machine spreads over all engines of a workload instead of spoiling one figure; "
                   "peak RSS is the largest of the children's. The parent only forks, collects and prints.\n"
                 : "- Each (engine, workload) figure runs in its own forked child, so peak RSS is per figure; the "
                   "parent only forks, collects and prints.\n")
      << "- Peers (bench/peers/, one executable each, built when their Debian package is installed) replay "
         "the same trace, generated by the same code with the same seeds, with the same op body on slots "
         "initialised alike, and report the same digest; their child process execs the peer, so peak RSS "
         "is theirs. OpenMP: `parallel` + `single`, one `task` per op with `depend(in: slot...)` / "
         "`depend(inout: slot...)`, timed from entering the parallel region to its end. oneTBB: the DAG a "
         "dependency engine would derive (last writer; readers since it) as one `continue_node` per op, "
         "timed from putting a message into the roots to `wait_for_all` (`tbb-flow`) or from the first "
         "node's construction (`tbb-flow+build`). StarPU: `starpu_init` (CPU workers only, one per "
         "hardware thread, scheduler `eager`, no performance models) and the registration of one variable "
         "handle per variable are outside the timed region; timed: `starpu_task_submit` of every op "
         "(STARPU_R / STARPU_RW buffers) to `starpu_task_wait_for_all`; submission is capped at 4096 tasks "
         "in flight, like ordo's default backpressure.\n"
         "- `bench/callgrind_per_op.sh` (ordo) and `bench/callgrind_peers.sh` (peers) count instructions per "
         "op under callgrind; `scripts/dev.sh bench ... --write-docs` runs both and passes their table to "
         "`--callgrind-file`. `bench/callgrind_per_op.sh --pusher` counts the pushing thread alone (one "
         "profile per thread; its count minus a serial-only run's, over ops).\n"
         "- METG, Task Bench's measure of a runtime (`ordo_workloads --metg`, not part of this report): the "
         "smallest busy work per op at which a run still reaches 50% of the ideal parallel efficiency, `ops x "
         "work / (workers x wall time)`. W1, W4 and W5 are replayed with the W6 spin in every op body "
         "(calibrated once), swept from 0.1 to 1000 us at 2 points per decade (`--metg-range LO:HI:N`) with "
         "about 0.2 s of busy work per worker at each point (at most 100k ops, at least 200 per worker; 3 "
         "runs, up to 15 where the op cap leaves less work), each point verified against a serial replay of "
         "its trace. ordo and the peers run the same number of threads that run op bodies (`--workers N`, "
         "default the usable CPUs: a peer's waiting thread is one of them, ordo's pusher is not). The METG is "
         "interpolated in log space between the two points around 50% (`us=<LO` or `us=>HI` outside the "
         "sweep); `--metg-svg PATH` plots the curves (docs/metg.svg).\n\n";

  std::ofstream file(path, std::ios::trunc);
  if (!file) throw std::runtime_error("cannot write " + path);
  file << out.str();
  if (notes.empty()) {
    file << kNotesMarker << "\n";
  } else {
    file << notes;
  }
  if (!file) throw std::runtime_error("error writing " + path);
}

}  // namespace ordo_bench
