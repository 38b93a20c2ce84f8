// tests/dist/dead_rank/dead_rank.cpp - a rank dies while the others wait for
// its data: the job must end with a message naming it, never hang. The
// last rank exits at once (no MPI_Finalize) before sending what rank 0's op
// reads; rank 0 waits in wait_for_all. Open MPI's mpirun sees a process end
// without MPI_Finalize, reports it and kills the job (its default, which
// ordo::dist keeps); the ctest entry checks the report and the time bound.
#include <cstdio>
#include <cstdlib>

#include "ordo/dist.hpp"

int main(int argc, char** argv) {
  ordo::dist::Mpi mpi(argc, argv);
  ordo::Options o;
  o.cpu_workers = 1;
  ordo::Engine engine(o);
  ordo::dist::Dist d(engine);
  std::uint64_t a = 1, b = 0;
  const int victim = d.size() - 1;
  const ordo::dist::DistVar va = d.register_value(a, victim);
  const ordo::dist::DistVar vb = d.register_value(b, 0);
  if (d.rank() == victim) {
    std::fprintf(stderr, "dead_rank: rank %d exits now, before sending\n", victim);
    std::fflush(stderr);
    std::_Exit(3);
  }
  d.push([&] { b = a; }, {va}, {vb});
  d.wait_for_all();  // never returns: the job ends around it
  std::printf("dead_rank: rank %d was not stopped (unexpected)\n", d.rank());
  return 0;
}
