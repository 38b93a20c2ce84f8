// bench/dist/dist_w5.hpp - the distributed W5 both engines replay: a square
// grid of tiles, tile (i, j) computed from the last row of tile (i-1, j) and
// the last column of tile (i, j-1), rows of tiles dealt to ranks in turn
// (owner computes). A tile is `cell` x `cell` doubles; its work is the
// stencil pass plus `spin` dependent hash steps, so that a tile takes about
// --work-us (calibrated once by the driver, the same for every engine).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace ordo_bench::dist {

struct Args {
  std::size_t tiles = 24;    // per side
  std::size_t cell = 64;     // cells per tile side
  std::uint64_t spin = 0;    // extra hash steps per tile
  int reps = 5;
  int workers = 1;           // CPU workers per rank
  double calibrate_us = 0;   // > 0: print the spin for this many us per tile and exit
  bool local = false;        // ordo only: one process, no ordo::dist (the single-process baseline)
  bool no_cache = false;     // ordo only
  std::size_t books = 0;     // ordo only, > 0: time this many pushes on a rank that takes no part (2+ ranks)
};

inline Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&] { return i + 1 < argc ? argv[++i] : "0"; };
    if (k == "--tiles") a.tiles = std::strtoull(val(), nullptr, 10);
    else if (k == "--cell") a.cell = std::strtoull(val(), nullptr, 10);
    else if (k == "--spin") a.spin = std::strtoull(val(), nullptr, 10);
    else if (k == "--reps") a.reps = std::atoi(val());
    else if (k == "--workers") a.workers = std::atoi(val());
    else if (k == "--calibrate-us") a.calibrate_us = std::atof(val());
    else if (k == "--local") a.local = true;
    else if (k == "--no-cache") a.no_cache = true;
    else if (k == "--books") a.books = std::strtoull(val(), nullptr, 10);
  }
  return a;
}

inline std::uint64_t fmix(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Tile (i, j)'s work. `up` / `left`: the neighbours' buffers, or null at the edge.
inline void tile_work(double* t, const double* up, const double* left, std::size_t b, std::size_t i, std::size_t j,
                      std::uint64_t spin) {
  for (std::size_t r = 0; r < b; ++r) {
    for (std::size_t c = 0; c < b; ++c) {
      const double above = r > 0 ? t[(r - 1) * b + c] : (up != nullptr ? up[(b - 1) * b + c] : 1.0);
      const double before = c > 0 ? t[r * b + c - 1] : (left != nullptr ? left[r * b + b - 1] : 1.0);
      t[r * b + c] = 0.5 * above + 0.25 * before + 0.001 * double(i + j + r + c);
    }
  }
  std::uint64_t h = i * 1000003 + j;
  for (std::uint64_t k = 0; k < spin; ++k) h = fmix(h + k);
  t[0] += double(h & 1) * 1e-300;  // keeps the spin; changes nothing measurable
}

inline std::uint64_t digest(const double* t, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t k = 0; k < n; ++k) {
    std::uint64_t u = 0;
    std::memcpy(&u, &t[k], sizeof u);
    h = (h ^ u) * 1099511628211ULL;
  }
  return h;
}

inline int owner_of(std::size_t i, int ranks) { return static_cast<int>(i % std::size_t(ranks)); }

/// The serial run's digest of every tile, and the serial time of one run.
inline std::vector<std::uint64_t> serial_digests(const Args& a, double* ms) {
  const std::size_t n = a.tiles, b = a.cell;
  std::vector<std::vector<double>> g(n * n, std::vector<double>(b * b, 0.0));
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      tile_work(g[i * n + j].data(), i > 0 ? g[(i - 1) * n + j].data() : nullptr,
                j > 0 ? g[i * n + j - 1].data() : nullptr, b, i, j, a.spin);
    }
  }
  if (ms != nullptr) *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::uint64_t> d(n * n);
  for (std::size_t k = 0; k < n * n; ++k) d[k] = digest(g[k].data(), b * b);
  return d;
}

/// Spin steps for about `us` microseconds per tile on top of the stencil pass.
inline std::uint64_t calibrate(const Args& a, double us) {
  std::vector<double> t(a.cell * a.cell), up(t.size(), 1.0), left(t.size(), 1.0);
  auto time_one = [&](std::uint64_t spin) {
    double best = 1e9;
    for (int k = 0; k < 50; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      tile_work(t.data(), up.data(), left.data(), a.cell, 1, 1, spin);
      best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double base = time_one(0);
  const double per = (time_one(100000) - base) / 100000.0;
  return base >= us || per <= 0 ? 0 : static_cast<std::uint64_t>((us - base) / per);
}

/// `x` printed with `fmt`, or "n/a" where negative (not measured).
inline std::string num(double x, const char* fmt) {
  if (x < 0) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}

/// One result line, the same for every engine (negative figures: not measured).
inline void report(const char* engine, int ranks, const Args& a, std::vector<double> ms, double bytes_per_op,
                   double progress_cpu_pct, bool ok) {
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  std::printf("RESULT engine=%s ranks=%d tiles=%zu cell=%zu workers=%d median_ms=%.2f min_ms=%.2f max_ms=%.2f "
              "us_per_tile=%.1f bytes_per_op=%s progress_cpu_pct=%s check=%s\n",
              engine, ranks, a.tiles, a.cell, a.workers, med, ms.front(), ms.back(),
              1000.0 * med / double(a.tiles * a.tiles), num(bytes_per_op, "%.0f").c_str(), num(progress_cpu_pct, "%.1f").c_str(),
              ok ? "ok" : "WRONG");
  std::fflush(stdout);
}

}  // namespace ordo_bench::dist
