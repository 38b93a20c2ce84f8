// bench/workloads/line_transfer.cpp - what handing one cache line between two
// CPUs costs on this machine: the floor under any op that is pushed on one
// thread and run on another (docs/benchmarks.md, "2 CPUs, quiet").
//
// Two threads pinned to two CPUs take turns on one atomic; each round trip
// moves its line there and back. Prints the one-way time per round.
// usage: ordo_line_transfer [CPU_A CPU_B]   (default 0 1)
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

alignas(64) std::atomic<long> g_turn{0};

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    std::fprintf(stderr, "ordo_line_transfer: cannot pin a thread to CPU %d\n", cpu);
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int a = argc > 2 ? std::atoi(argv[1]) : 0;
  const int b = argc > 2 ? std::atoi(argv[2]) : 1;
  constexpr long kTrips = 2'000'000;
  for (int round = 0; round < 5; ++round) {
    g_turn.store(0);
    std::thread other([b] {
      pin(b);
      for (long i = 0; i < kTrips; ++i) {
        while (g_turn.load(std::memory_order_acquire) != 2 * i + 1) {
        }
        g_turn.store(2 * i + 2, std::memory_order_release);
      }
    });
    pin(a);
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < kTrips; ++i) {
      g_turn.store(2 * i + 1, std::memory_order_release);
      while (g_turn.load(std::memory_order_acquire) != 2 * i + 2) {
      }
    }
    const auto t1 = std::chrono::steady_clock::now();
    other.join();
    std::printf("LINE cpus=%d,%d one_way_ns=%.1f\n", a, b,
                std::chrono::duration<double, std::nano>(t1 - t0).count() / (2.0 * kTrips));
  }
  return 0;
}
