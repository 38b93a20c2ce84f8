// bench/peers/omp_peer.cpp - the OpenMP peer: one task per op, its
// dependences declared with depend(in: ...) / depend(inout: ...) on the
// variables' slots.
// One thread creates every task (parallel + single), as one pusher does for
// ordo; the other threads of the team run them.
//
// Built twice from this one file: by g++ against libgomp (ordo_peer_omp) and
// by clang++ against LLVM's libomp (ordo_peer_omp_llvm, bench/CMakeLists.txt).
#include <omp.h>

#include <chrono>

#include "peer_main.hpp"

// One task running op i, its depend clauses the macro's arguments.
#define ORDO_OMP_STR_(x) #x
#define ORDO_OMP_STR(x) ORDO_OMP_STR_(x)
#define ORDO_OMP_TASK(...)                                          \
  {                                                                 \
    _Pragma(ORDO_OMP_STR(omp task firstprivate(i) __VA_ARGS__)) run_op(*trace, slots, i); \
    break;                                                          \
  }
// The slot of the op's k-th variable: what its depend clauses name.
#define S(k) slots[a[k]]

namespace ordo_bench::peer {

// The team's size: the thread creating the tasks runs them too (at the
// region's closing barrier), as tbb-flow's waiting thread does.
unsigned init(const Args& args) {
  if (args.workers != 0) omp_set_num_threads(static_cast<int>(args.workers));
  return static_cast<unsigned>(omp_get_max_threads());
}

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
      // The shapes the workloads use get an exact depend list (about twice
      // as fast as the iterator form with libgomp); any other shape takes
      // the OpenMP 5.0 iterator form.
      switch (nr * 8 + (na - nr)) {
        case 0 * 8 + 1: ORDO_OMP_TASK(depend(inout : S(0)))
        case 0 * 8 + 2: ORDO_OMP_TASK(depend(inout : S(0), S(1)))
        case 1 * 8 + 1: ORDO_OMP_TASK(depend(in : S(0)) depend(inout : S(1)))
        case 1 * 8 + 2: ORDO_OMP_TASK(depend(in : S(0)) depend(inout : S(1), S(2)))
        case 2 * 8 + 1: ORDO_OMP_TASK(depend(in : S(0), S(1)) depend(inout : S(2)))
        case 2 * 8 + 2: ORDO_OMP_TASK(depend(in : S(0), S(1)) depend(inout : S(2), S(3)))
        case 3 * 8 + 1: ORDO_OMP_TASK(depend(in : S(0), S(1), S(2)) depend(inout : S(3)))
        case 3 * 8 + 2: ORDO_OMP_TASK(depend(in : S(0), S(1), S(2)) depend(inout : S(3), S(4)))
        default:
          ORDO_OMP_TASK(depend(iterator(k = 0 : nr), in : S(k)) depend(iterator(k = nr : na), inout : S(k)))
      }
    }
  }  // the implicit barrier at the end of the parallel region waits for every task
  const auto t1 = Clock::now();
  return {std::chrono::duration<double>(t1 - t0).count(), 0};
}

void shutdown() {}

}  // namespace ordo_bench::peer
