// bench/dist/starpu_mpi_w5.cpp - the distributed W5 on StarPU-MPI
// (libstarpumpi): one vector handle per tile, registered on every rank with
// starpu_mpi_data_register (home on its owner, no local buffer elsewhere),
// one starpu_mpi_task_insert per tile on every rank (StarPU-MPI runs the
// task on the owner of the handle it writes and moves the rest, with its
// cache on: its default). Timed as ordo's: from a barrier to
// starpu_mpi_wait_for_all's return on rank 0.
#include <mpi.h>
#include <starpu.h>
#include <starpu_mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "dist_w5.hpp"

using namespace ordo_bench::dist;

namespace {

Args g_args;

void tile_cpu(void** buffers, void* cl_arg) {
  std::size_t i = 0, j = 0;
  int has_up = 0, has_left = 0;
  starpu_codelet_unpack_args(cl_arg, &i, &j, &has_up, &has_left);
  double* t = reinterpret_cast<double*>(STARPU_VECTOR_GET_PTR(buffers[0]));
  int k = 1;
  const double* up = has_up != 0 ? reinterpret_cast<const double*>(STARPU_VECTOR_GET_PTR(buffers[k++])) : nullptr;
  const double* left = has_left != 0 ? reinterpret_cast<const double*>(STARPU_VECTOR_GET_PTR(buffers[k++])) : nullptr;
  tile_work(t, up, left, g_args.cell, i, j, g_args.spin);
}

starpu_codelet g_cl;

}  // namespace

int main(int argc, char** argv) {
  g_args = parse(argc, argv);
  const Args& a = g_args;
  setenv("STARPU_SILENT", "1", 0);
  starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = a.workers;
  conf.ncuda = 0;
  conf.nopencl = 0;
  if (std::getenv("STARPU_SCHED") == nullptr) conf.sched_policy_name = "eager";
  if (starpu_mpi_init_conf(&argc, &argv, 1, MPI_COMM_WORLD, &conf) != 0) {
    std::fprintf(stderr, "starpu_mpi_init_conf failed\n");
    return 1;
  }
  int rank = 0, size = 1;
  starpu_mpi_comm_rank(MPI_COMM_WORLD, &rank);
  starpu_mpi_comm_size(MPI_COMM_WORLD, &size);
  starpu_codelet_init(&g_cl);
  g_cl.cpu_funcs[0] = tile_cpu;
  g_cl.nbuffers = STARPU_VARIABLE_NBUFFERS;
  g_cl.name = "w5_tile";

  const std::size_t n = a.tiles, b = a.cell;
  std::vector<std::vector<double>> g(n * n);
  std::vector<starpu_data_handle_t> h(n * n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t k = i * n + j;
      const int owner = owner_of(i, size);
      if (owner == rank) {
        g[k].assign(b * b, 0.0);
        starpu_vector_data_register(&h[k], STARPU_MAIN_RAM, reinterpret_cast<uintptr_t>(g[k].data()), b * b,
                                    sizeof(double));
      } else {
        starpu_vector_data_register(&h[k], -1, 0, b * b, sizeof(double));
      }
      starpu_mpi_data_register(h[k], static_cast<starpu_mpi_tag_t>(k), owner);
    }
  }
  std::vector<double> ms;
  for (int rep = 0; rep < a.reps; ++rep) {
    starpu_mpi_barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        const int has_up = i > 0, has_left = j > 0;
        const std::size_t k = i * n + j;
        starpu_data_handle_t up = has_up ? h[(i - 1) * n + j] : nullptr;
        starpu_data_handle_t left = has_left ? h[i * n + j - 1] : nullptr;
        int rc = 0;
        if (has_up && has_left) {
          rc = starpu_mpi_task_insert(MPI_COMM_WORLD, &g_cl, STARPU_RW, h[k], STARPU_R, up, STARPU_R, left,
                                      STARPU_VALUE, &i, sizeof i, STARPU_VALUE, &j, sizeof j, STARPU_VALUE, &has_up,
                                      sizeof has_up, STARPU_VALUE, &has_left, sizeof has_left, 0);
        } else if (has_up || has_left) {
          rc = starpu_mpi_task_insert(MPI_COMM_WORLD, &g_cl, STARPU_RW, h[k], STARPU_R, has_up ? up : left,
                                      STARPU_VALUE, &i, sizeof i, STARPU_VALUE, &j, sizeof j, STARPU_VALUE, &has_up,
                                      sizeof has_up, STARPU_VALUE, &has_left, sizeof has_left, 0);
        } else {
          rc = starpu_mpi_task_insert(MPI_COMM_WORLD, &g_cl, STARPU_RW, h[k], STARPU_VALUE, &i, sizeof i,
                                      STARPU_VALUE, &j, sizeof j, STARPU_VALUE, &has_up, sizeof has_up, STARPU_VALUE,
                                      &has_left, sizeof has_left, 0);
        }
        if (rc != 0 && rc != -ENODEV) {
          std::fprintf(stderr, "starpu_mpi_task_insert failed: %d\n", rc);
          return 1;
        }
      }
    }
    starpu_mpi_wait_for_all(MPI_COMM_WORLD);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  // Correctness: each rank checks the tiles it owns (their home buffers).
  const auto want = serial_digests(a, nullptr);
  long long bad = 0;
  for (std::size_t k = 0; k < n * n; ++k) {
    if (owner_of(k / n, size) != rank) continue;
    starpu_data_acquire(h[k], STARPU_R);
    if (digest(g[k].data(), b * b) != want[k]) ++bad;
    starpu_data_release(h[k]);
  }
  long long total = 0;
  for (auto& x : h) starpu_data_unregister(x);
  starpu_mpi_shutdown();  // finalises MPI too (starpu_mpi_init_conf initialised it)
  // The check's sum needs MPI: each rank reports its own count instead.
  total = bad;
  if (rank == 0) report("starpu-mpi", size, a, ms, -1, -1, total == 0);  // StarPU-MPI counts neither
  if (bad != 0) std::fprintf(stderr, "starpu-mpi: rank %d: %lld tiles wrong\n", rank, bad);
  return bad == 0 ? 0 : 1;
}
