// A program outside the ordo tree, built against an installed ordo (target
// ordo::dist): one rank (MPI's singleton start, no mpirun) pushes over a
// distributed variable and waits for it.
#include <ordo/dist.hpp>
#include <ordo/ordo.hpp>

#include <cstdint>
#include <cstdio>

int main(int argc, char** argv) {
  ordo::dist::Mpi mpi(argc, argv);
  ordo::Engine engine;
  std::uint64_t value = 1;
  {
    ordo::dist::Dist dist(engine);
    const ordo::dist::DistVar v = dist.register_value(value, 0);
    dist.push([&] { value += 41; }, {}, {v});
    dist.wait_for_all();
    std::printf("consumer_dist: rank %d of %d: %llu\n", dist.rank(), dist.size(),
                static_cast<unsigned long long>(value));
  }
  return value == 42 ? 0 : 1;
}
