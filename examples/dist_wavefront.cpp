// examples/dist_wavefront.cpp - W5 tiled over MPI ranks on ordo::dist, and
// the code of docs/dist.md (each [snippet:NAME] ... [end] region is quoted
// there verbatim; docs_snippets checks it). Run:
//   mpirun -np 2 ./dist_wavefront [tiles per side] [cells per tile side]
// Tile (i, j) is computed from the last row of tile (i-1, j) and the last
// column of tile (i, j-1); rows of tiles are dealt to ranks in turn, so the
// wavefront pipelines across them. Checks itself against a serial run.
#undef NDEBUG  // the checks below are this smoke test's, in every build type
#include <ordo/dist.hpp>
#include <ordo/ordo.hpp>

#include <cassert>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using Tile = std::vector<double>;

/// The tile's work: each cell from the cell above and the cell to its left
/// (across tile borders through `up` and `left`, empty at the grid's edge).
void compute(Tile& t, const Tile* up, const Tile* left, std::size_t b, std::size_t i, std::size_t j) {
  for (std::size_t r = 0; r < b; ++r) {
    for (std::size_t c = 0; c < b; ++c) {
      const double above = r > 0 ? t[(r - 1) * b + c] : (up != nullptr ? (*up)[(b - 1) * b + c] : 1.0);
      const double before = c > 0 ? t[r * b + c - 1] : (left != nullptr ? (*left)[r * b + b - 1] : 1.0);
      t[r * b + c] = 0.5 * above + 0.25 * before + 0.001 * double(i + j + r + c);
    }
  }
}

std::uint64_t bits(const Tile& t) {
  std::uint64_t h = 1469598103934665603ULL;
  for (double x : t) {
    std::uint64_t u = 0;
    std::memcpy(&u, &x, sizeof u);
    h = (h ^ u) * 1099511628211ULL;
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 8;   // tiles per side
  const std::size_t b = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 32;  // cells per tile side

  // [snippet:setup]
  ordo::dist::Mpi mpi(argc, argv);  // MPI_Init_thread(MPI_THREAD_SERIALIZED) ... MPI_Finalize
  ordo::Engine engine;
  // This rank's share; every rank runs this same program. The options shown
  // are the defaults: keep received values (the cache), and wait up to 60 s
  // for this rank's work at destruction before ending the job.
  ordo::dist::Dist dist(engine, {.cache = true, .shutdown_timeout = std::chrono::seconds(60)});

  // The same registrations in the same order on every rank: tile (i, j)
  // lives on rank i % size; elsewhere its buffer is a cached copy.
  std::vector<Tile> tiles(n * n, Tile(b * b, 0.0));
  std::vector<ordo::dist::DistVar> var;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      Tile& t = tiles[i * n + j];
      var.push_back(dist.register_bytes(t.data(), t.size() * sizeof(double), int(i) % dist.size()));
    }
  }
  // [end]

  // [snippet:handles]
  ordo::dist::DistVar none;  // default-constructed: no registration behind it
  assert(none.empty() && none.local().empty() && none.id() == 0 && none.owner() == 0);
  // Pushing it throws ordo::Error (Errc::invalid_argument) on the rank that does.
  const ordo::dist::DistVar& first = var.front();  // registered: id 0 (its ordinal), owner rank 0
  assert(!first.empty() && first.id() == 0 && first.owner() == 0);
  // [end]

  // [snippet:push]
  // The same pushes on every rank. Each runs where the tile it writes
  // lives; the tiles it reads come from their owners when they are remote
  // (once per version: a later read of the same value hits the cache).
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      std::vector<ordo::dist::DistVar> reads;
      if (i > 0) reads.push_back(var[(i - 1) * n + j]);
      if (j > 0) reads.push_back(var[i * n + j - 1]);
      dist.push(
          [&, i, j] {
            compute(tiles[i * n + j], i > 0 ? &tiles[(i - 1) * n + j] : nullptr,
                    j > 0 ? &tiles[i * n + j - 1] : nullptr, b, i, j);
          },
          reads, {var[i * n + j]}, {.name = "tile"});
    }
  }
  dist.wait_for_all();  // collective: every rank's ops have finished
  // [end]

  // [snippet:check]
  // Each rank checks the tiles it owns against a serial run; the ranks
  // then add up their counts (allreduce on the progress thread).
  std::vector<Tile> serial(n * n, Tile(b * b, 0.0));
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      compute(serial[i * n + j], i > 0 ? &serial[(i - 1) * n + j] : nullptr, j > 0 ? &serial[i * n + j - 1] : nullptr,
              b, i, j);
    }
  }
  std::uint64_t counts[2] = {0, 0};  // tiles checked, tiles wrong
  for (std::size_t k = 0; k < n * n; ++k) {
    if (var[k].owner() != dist.rank()) continue;
    ++counts[0];
    if (bits(tiles[k]) != bits(serial[k])) ++counts[1];
  }
  dist.allreduce_sum(counts);
  const ordo::dist::Stats s = dist.stats();
  // [end]
  // [snippet:stats]
  // Every field of this rank's counters (dist.stats() may be called from any thread).
  std::printf("rank %d: ops_run %llu, messages_sent %llu (%llu bytes), messages_received %llu (%llu bytes), "
              "early_messages %llu, cache_hits %llu, transfers %llu, progress_cpu_seconds %.3f\n",
              dist.rank(), static_cast<unsigned long long>(s.ops_run),
              static_cast<unsigned long long>(s.messages_sent), static_cast<unsigned long long>(s.bytes_sent),
              static_cast<unsigned long long>(s.messages_received), static_cast<unsigned long long>(s.bytes_received),
              static_cast<unsigned long long>(s.early_messages), static_cast<unsigned long long>(s.cache_hits),
              static_cast<unsigned long long>(s.transfers), s.progress_cpu_seconds);
  // [end]
  if (dist.rank() == 0) {
    std::printf("dist_wavefront: %zu x %zu tiles of %zu x %zu on %d ranks: %llu checked, %llu wrong; "
                "rank 0 sent %llu messages (%llu bytes), %llu cache hits\n",
                n, n, b, b, dist.size(), static_cast<unsigned long long>(counts[0]),
                static_cast<unsigned long long>(counts[1]), static_cast<unsigned long long>(s.messages_sent),
                static_cast<unsigned long long>(s.bytes_sent), static_cast<unsigned long long>(s.cache_hits));
  }
  assert(counts[0] == n * n && counts[1] == 0);
  return 0;
}
