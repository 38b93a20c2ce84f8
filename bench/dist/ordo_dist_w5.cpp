// bench/dist/ordo_dist_w5.cpp - the distributed W5 on ordo::dist (mpirun -np
// N), or with --local on one ordo::Engine in one process (the baseline).
// Timed, per repetition: from a barrier to wait_for_all's return on rank 0
// (which ends with a barrier): submission, transfers and work.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <ordo/dist.hpp>
#include <ordo/ordo.hpp>

#include "dist_w5.hpp"

using namespace ordo_bench::dist;

namespace {

/// The books' cost on a rank that takes no part: every variable lives on
/// rank 1 and every op runs there; rank 0 times its push loop, in which it
/// only keeps the books (the submission cost that every rank pays for every
/// push of the job, docs/dist.md's scaling section).
int run_books(ordo::dist::Dist& dist, std::size_t pushes) {
  constexpr std::size_t kVars = 4096;
  std::vector<std::uint64_t> slot(kVars, 0);
  std::vector<ordo::dist::DistVar> v;
  for (std::size_t k = 0; k < kVars; ++k) v.push_back(dist.register_value(slot[k], 1));
  dist.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < pushes; ++i) {
    const ordo::dist::DistVar reads[2] = {v[(i * 7 + 1) % kVars], v[(i * 13 + 2) % kVars]};
    dist.push([&slot, i] { slot[i % kVars] += 1; }, std::span<const ordo::dist::DistVar>(reads, 2), v[i % kVars]);
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  dist.wait_for_all();
  if (dist.rank() == 0) {
    std::printf("BOOKS ranks=%d ns_per_push_uninvolved=%.1f (2 reads + 1 write)\n", dist.size(), ns / double(pushes));
  }
  return 0;
}

int run_local(const Args& a) {
  ordo::Options o;
  o.cpu_workers = static_cast<unsigned>(a.workers);
  ordo::Engine engine(o);
  const std::size_t n = a.tiles, b = a.cell;
  std::vector<std::vector<double>> g(n * n, std::vector<double>(b * b, 0.0));
  std::vector<ordo::Var> v(n * n);
  for (auto& x : v) x = engine.new_variable();
  std::vector<double> ms;
  for (int rep = 0; rep < a.reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        ordo::Var reads[2];
        std::size_t nr = 0;
        if (i > 0) reads[nr++] = v[(i - 1) * n + j];
        if (j > 0) reads[nr++] = v[i * n + j - 1];
        engine.push_sync(
            [&, i, j] {
              tile_work(g[i * n + j].data(), i > 0 ? g[(i - 1) * n + j].data() : nullptr,
                        j > 0 ? g[i * n + j - 1].data() : nullptr, b, i, j, a.spin);
            },
            ordo::Context::cpu(), std::span<const ordo::Var>(reads, nr), v[i * n + j]);
      }
    }
    engine.wait_for_all();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const auto want = serial_digests(a, nullptr);
  bool ok = true;
  for (std::size_t k = 0; k < n * n; ++k) ok &= digest(g[k].data(), b * b) == want[k];
  report("ordo-local", 1, a, ms, 0, 0, ok);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (a.calibrate_us > 0) {
    std::printf("%llu\n", static_cast<unsigned long long>(calibrate(a, a.calibrate_us)));
    return 0;
  }
  if (a.local) return run_local(a);
  ordo::dist::Mpi mpi(argc, argv);
  ordo::Options o;
  o.cpu_workers = static_cast<unsigned>(a.workers);
  ordo::Engine engine(o);
  ordo::dist::Dist dist(engine, {.cache = !a.no_cache});
  if (a.books > 0) return run_books(dist, a.books);
  const std::size_t n = a.tiles, b = a.cell;
  std::vector<std::vector<double>> g(n * n, std::vector<double>(b * b, 0.0));
  std::vector<ordo::dist::DistVar> v;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      v.push_back(dist.register_bytes(g[i * n + j].data(), b * b * sizeof(double), owner_of(i, dist.size())));
    }
  }
  std::vector<double> ms;
  const ordo::dist::Stats s0 = dist.stats();
  double wall_ms = 0, submit_ms = 0;
  for (int rep = 0; rep < a.reps; ++rep) {
    dist.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        ordo::dist::DistVar reads[2];
        std::size_t nr = 0;
        if (i > 0) reads[nr++] = v[(i - 1) * n + j];
        if (j > 0) reads[nr++] = v[i * n + j - 1];
        dist.push(
            [&, i, j] {
              tile_work(g[i * n + j].data(), i > 0 ? g[(i - 1) * n + j].data() : nullptr,
                        j > 0 ? g[i * n + j - 1].data() : nullptr, b, i, j, a.spin);
            },
            std::span<const ordo::dist::DistVar>(reads, nr), v[i * n + j]);
      }
    }
    submit_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    dist.wait_for_all();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    wall_ms += ms.back();
  }
  const ordo::dist::Stats s1 = dist.stats();
  // Correctness: each rank checks the tiles it owns; the counts are summed.
  const auto want = serial_digests(a, nullptr);
  std::uint64_t sums[3] = {0, s1.bytes_sent - s0.bytes_sent, 0};
  for (std::size_t k = 0; k < n * n; ++k) {
    if (v[k].owner() == dist.rank() && digest(g[k].data(), b * b) != want[k]) ++sums[0];
  }
  sums[2] = static_cast<std::uint64_t>((s1.progress_cpu_seconds - s0.progress_cpu_seconds) * 1e6);
  dist.allreduce_sum(sums);
  if (dist.rank() == 0) {
    const double ops = double(n * n) * a.reps;
    const double cpu_pct = 100.0 * (double(sums[2]) / 1e3) / (wall_ms * dist.size());  // per rank, of wall time
    report(a.no_cache ? "ordo-dist-nocache" : "ordo-dist", dist.size(), a, ms, double(sums[1]) / ops, cpu_pct,
           sums[0] == 0);
    // Submission: rank 0's push loop (books for every push, ops and transfers for its own).
    std::printf("SUBMIT engine=%s ranks=%d us_per_push=%.3f\n", a.no_cache ? "ordo-dist-nocache" : "ordo-dist",
                dist.size(), 1000.0 * submit_ms / ops);
  }
  return sums[0] == 0 ? 0 : 1;
}
