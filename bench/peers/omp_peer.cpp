// bench/peers/omp_peer.cpp - the OpenMP peer: one task per op, its
// dependences declared with depend(in: ...) / depend(inout: ...) on the
// variables' slots (OpenMP 5.0 iterators for the variable-length lists).
// One thread creates every task (parallel + single), as one pusher does for
// ordo; the other threads of the team run them.
//
// Built twice from this one file: by g++ against libgomp (ordo_peer_omp) and
// by clang++ against LLVM's libomp (ordo_peer_omp_llvm, bench/CMakeLists.txt).
#include <omp.h>

#include <chrono>

#include "peer_main.hpp"

namespace ordo_bench::peer {

unsigned init(const Args&) { return static_cast<unsigned>(omp_get_max_threads()); }

Run run(const Trace& t, std::uint64_t* slots, const Args&) {
  using Clock = std::chrono::steady_clock;
  const auto n = static_cast<std::uint32_t>(t.ops());
  const Trace* trace = &t;
  const std::uint32_t* acc = t.acc.data();
  const std::uint32_t* begin = t.begin.data();
  const std::uint8_t* n_reads = t.n_reads.data();
  const auto t0 = Clock::now();
#pragma omp parallel
#pragma omp single
  {
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t* a = acc + begin[i];
      const int nr = n_reads[i];
      const int na = static_cast<int>(begin[i + 1] - begin[i]);
#pragma omp task firstprivate(i) depend(iterator(k = 0 : nr), in : slots[a[k]]) \
    depend(iterator(k = nr : na), inout : slots[a[k]])
      run_op(*trace, slots, i);
    }
  }  // the implicit barrier at the end of the parallel region waits for every task
  const auto t1 = Clock::now();
  return {std::chrono::duration<double>(t1 - t0).count(), 0};
}

void shutdown() {}

}  // namespace ordo_bench::peer
