// bench/workloads/metg.cpp - the METG sweep (see metg.hpp).
#include "metg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <exception>
#include <string>

#include "report.hpp"
#include "workload.hpp"

namespace ordo_bench {

namespace {

/// The sweep's grid: lo, lo * 10^(1/per_decade), ... up to hi (inclusive,
/// within rounding).
std::vector<double> grid(const MetgConfig& cfg) {
  std::vector<double> g;
  for (int k = 0;; ++k) {
    const double us = cfg.lo_us * std::pow(10.0, static_cast<double>(k) / cfg.per_decade);
    if (us > cfg.hi_us * (1 + 1e-9)) break;
    g.push_back(us);
  }
  return g;
}

/// Ops at a point: about work_s of busy work, so that every point takes a
/// similar wall time. The floor keeps W5's grid wide enough (about 14 x 14
/// per worker) that filling and draining the wavefront costs little of the
/// ideal; the cap bounds the smallest grains, whose time is all overhead.
std::size_t ops_at(const MetgConfig& cfg, double work_s, double us) {
  const std::size_t floor_ops = std::size_t{200} * cfg.workers;
  const auto want = static_cast<std::size_t>(std::llround(work_s / (us * 1e-6)));
  return std::clamp(want, std::min(floor_ops, cfg.max_ops), cfg.max_ops);
}

/// Runs at a point: where the op cap leaves less than work_s of busy work,
/// up to 5x more, so that the median at the smallest grains (runs of a few
/// ms, the noisiest) rests on a similar amount of timed work.
int runs_at(const MetgConfig& cfg, double work_s, std::size_t ops, double us) {
  const double short_by = work_s / (static_cast<double>(ops) * us * 1e-6);
  return cfg.runs * static_cast<int>(std::clamp(std::round(short_by), 1.0, 5.0));
}

std::string fmt_us(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, us >= 100 ? "%.0f" : "%.3g", us);  // 1000, not 1e+03
  return buf;
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

void print_point(const std::string& engine, const std::string& pattern, const MetgPoint& p, unsigned workers,
                 const std::string& error) {
  std::printf(
      "METG_POINT engine=%s pattern=%s us=%s efficiency=%.3f ops=%zu wall_s=%.4g runs=%zu workers=%u other_load=%.2f "
      "ok=%d%s%s\n",
      engine.c_str(), pattern.c_str(), fmt_us(p.us).c_str(), p.efficiency, p.ops, p.wall_s, p.runs, workers,
      p.other_load, p.ok ? 1 : 0, error.empty() ? "" : " error=", error.c_str());
  std::fflush(stdout);
}

/// A measurement in a child; with --wait-quiet, after waiting for the machine
/// to calm down and again (at most twice) when others disturbed it, the
/// quietest kept: efficiency counts every core, so a neighbour's load is
/// charged to the engine.
Figure measure_quiet(const Job& job, const MetgConfig& cfg, const Progress& progress, const std::string& label) {
  Figure best;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    if (cfg.wait_quiet_s > 0) wait_until_quiet(cfg.wait_quiet_s, progress, label);
    progress.show(label);
    Figure fig = measure_in_child(job, progress, cfg.timeout_s);
    if (attempt == 1 || fig.other_load.value_or(0) < best.other_load.value_or(0)) best = std::move(fig);
    if (cfg.wait_quiet_s <= 0 || best.other_load.value_or(0) < kQuietLoad) break;
  }
  return best;
}

}  // namespace

MetgValue metg_of(const MetgCurve& c) {
  const MetgPoint* prev = nullptr;
  for (const MetgPoint& p : c.points) {
    if (!p.ok) continue;  // an unverified point says nothing about the engine
    if (p.efficiency >= 0.5) {
      if (prev == nullptr) return {p.us, true, false};
      const double t = (0.5 - prev->efficiency) / (p.efficiency - prev->efficiency);
      return {std::exp(std::log(prev->us) + t * (std::log(p.us) - std::log(prev->us))), false, false};
    }
    prev = &p;
  }
  return {c.points.empty() ? 0.0 : c.points.back().us, false, true};
}

int run_metg(const MetgConfig& cfg, Progress& progress) {
  const std::vector<double> grains = grid(cfg);
  const double work_s = cfg.work_s > 0 ? cfg.work_s : 0.2 * cfg.workers;
  const EngineSpec* serial = find_engine("serial");

  // One calibration for the whole sweep, long enough that a grain's iteration
  // count is exact to well under 1%: every engine and the serial loop spin alike.
  progress.show("METG: calibrating the busy work");
  const double ns_per_iter = 1e9 / calibrate_spin(1e6);

  std::vector<MetgCurve> curves;
  for (const std::string& pattern : cfg.patterns) {
    for (const EngineSpec* e : cfg.engines) curves.push_back({e->name, pattern, {}});
  }
  progress.set_total(static_cast<int>(cfg.patterns.size() * grains.size() * (cfg.engines.size() + 1)));

  bool all_ok = true;
  for (const std::string& pattern : cfg.patterns) {
    for (const double nominal_us : grains) {
      const auto spin = static_cast<std::uint32_t>(std::max(1.0, std::round(nominal_us * 1e3 / ns_per_iter)));
      const double us = spin * ns_per_iter * 1e-3;
      const std::size_t ops = ops_at(cfg, work_s, us);
      const std::string where = pattern + " at " + fmt_us(us) + " us";

      // The serial replay: the reference digest, and (one worker) a check of
      // the calibration: its efficiency should be close to 1.
      progress.next_figure();
      const Figure ref =
          measure_quiet(Job{*serial, pattern, ops, spin, 1, std::nullopt}, cfg, progress, where + ": serial");
      std::optional<std::uint64_t> reference;
      if (ref.m.ok) reference = ref.m.digest;
      {
        MetgPoint p{us, 0, ref.m.ops, ref.m.seconds.empty() ? 0 : median(ref.m.seconds), ref.m.ok,
                    ref.other_load.value_or(0), ref.m.seconds.size()};
        if (p.wall_s > 0) p.efficiency = static_cast<double>(p.ops) * us * 1e-6 / p.wall_s;
        progress.clear();
        print_point("serial", pattern, p, 1, ref.m.error);
      }
      all_ok = all_ok && ref.m.ok;

      for (const EngineSpec* e : cfg.engines) {
        progress.next_figure();
        EngineSpec spec = *e;
        if (spec.ordo) spec.ordo->cpu_workers = cfg.workers;
        if (spec.peer) spec.peer->args.insert(spec.peer->args.end(), {"--workers", std::to_string(cfg.workers)});
        const Job job{spec, pattern, ops, spin, runs_at(cfg, work_s, ops, us), reference};
        Figure fig = measure_quiet(job, cfg, progress, where + ": " + e->name);
        if (!reference && fig.m.error.empty()) fig.m.error = "no_serial_reference";
        MetgPoint p{us, 0, fig.m.ops, fig.m.seconds.empty() ? 0 : median(fig.m.seconds),
                    fig.m.ok && reference.has_value(), fig.other_load.value_or(0), fig.m.seconds.size()};
        if (p.wall_s > 0) p.efficiency = static_cast<double>(p.ops) * us * 1e-6 / (cfg.workers * p.wall_s);
        progress.clear();
        print_point(e->name, pattern, p, fig.m.workers, fig.m.error);
        if (p.ok && fig.m.workers != cfg.workers) {
          std::fprintf(stderr, "METG: %s ran %u workers, not %u\n", e->name.c_str(), fig.m.workers, cfg.workers);
        }
        all_ok = all_ok && p.ok;
        auto curve = std::find_if(curves.begin(), curves.end(),
                                  [&](const MetgCurve& c) { return c.engine == e->name && c.pattern == pattern; });
        curve->points.push_back(p);
      }
    }
  }
  progress.clear();

  const std::string range = fmt_us(grains.empty() ? cfg.lo_us : grains.front()) + "-" +
                            fmt_us(grains.empty() ? cfg.hi_us : grains.back());
  for (const MetgCurve& c : curves) {
    const MetgValue v = metg_of(c);
    const bool ok = std::all_of(c.points.begin(), c.points.end(), [](const MetgPoint& p) { return p.ok; });
    // Outside the range there is nothing to interpolate: "<lo" or ">hi".
    const std::string value = v.below_range ? "<" + fmt_us(v.us) : v.above_range ? ">" + fmt_us(v.us) : fmt_us(v.us);
    const char* note = v.below_range ? " note=reached_at_smallest_point" : v.above_range ? " note=never_reached" : "";
    std::printf("METG engine=%s pattern=%s us=%s workers=%u swept_us=%s ok=%d%s\n", c.engine.c_str(),
                c.pattern.c_str(), value.c_str(), cfg.workers, range.c_str(), ok ? 1 : 0, note);
  }
  std::fflush(stdout);

  if (cfg.svg_path) {
    try {
      const std::string caption = std::to_string(cfg.workers) + " workers, " + source_revision() + ", " + today() +
                                  ", " + cpu_model();
      write_metg_svg(*cfg.svg_path, curves, cfg, caption);
      std::fprintf(stderr, "ordo_workloads: wrote %s\n", cfg.svg_path->c_str());
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "ordo_workloads: %s\n", ex.what());
      return 1;
    }
  }
  return all_ok ? 0 : 3;
}

}  // namespace ordo_bench
