// bench/peers/starpu_peer.cpp - the StarPU peer: one data handle per
// variable (its slot, registered in main memory), one task per op whose
// buffers are the op's variables in STARPU_R (reads) or STARPU_RW (writes)
// mode, submitted from the main thread; StarPU derives the order (sequential
// consistency, its default).
//
// Set-up outside the timed region: starpu_init (CPU workers only, one per
// hardware thread, scheduler eager: a central FIFO, no performance models,
// so nothing is calibrated), and registering the handles. Timed: submitting
// every task and starpu_task_wait_for_all. Submission is throttled as ordo's
// default backpressure is (STARPU_LIMIT_MAX_SUBMITTED_TASKS = 4096), unless
// the environment says otherwise.
#include <sched.h>
#include <starpu.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "peer_main.hpp"

namespace ordo_bench::peer {

namespace {

// The op body needs the trace and the slots; StarPU's cl_arg carries the op
// index only (no per-task allocation), these carry the rest.
const Trace* g_trace = nullptr;
std::uint64_t* g_slots = nullptr;

void op_body(void** /*buffers*/, void* cl_arg) {
  // The handles are the slots themselves (main memory, CPU workers only), so
  // the shared op body can address them through g_slots.
  run_op(*g_trace, g_slots, static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(cl_arg)));
}

starpu_codelet g_codelet;

}  // namespace

unsigned init(const Args& args) {
  setenv("STARPU_SILENT", "1", 0);
  setenv("STARPU_LIMIT_MAX_SUBMITTED_TASKS", "4096", 0);
  setenv("STARPU_LIMIT_MIN_SUBMITTED_TASKS", "2048", 0);
  starpu_conf conf;
  starpu_conf_init(&conf);
  // The CPUs this process may use, as ordo's default (ordo::usable_cpus()).
  cpu_set_t set;
  CPU_ZERO(&set);
  const unsigned cores = ::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0
                             ? static_cast<unsigned>(CPU_COUNT(&set))
                             : std::max(1U, std::thread::hardware_concurrency());
  conf.ncpus = static_cast<int>(args.workers != 0 ? args.workers : cores);
  conf.ncuda = 0;
  conf.nopencl = 0;
  if (std::getenv("STARPU_SCHED") == nullptr) conf.sched_policy_name = "eager";
  const int rc = starpu_init(&conf);
  if (rc != 0) throw std::runtime_error("starpu_init failed: " + std::to_string(rc));
  starpu_codelet_init(&g_codelet);
  g_codelet.cpu_funcs[0] = op_body;
  g_codelet.nbuffers = STARPU_VARIABLE_NBUFFERS;
  g_codelet.name = "ordo_op";
  return starpu_cpu_worker_get_count();
}

Run run(const Trace& t, std::uint64_t* slots, const Args&) {
  using Clock = std::chrono::steady_clock;
  g_trace = &t;
  g_slots = slots;
  std::vector<starpu_data_handle_t> handles(t.num_vars);
  for (std::uint32_t v = 0; v < t.num_vars; ++v) {
    starpu_variable_data_register(&handles[v], STARPU_MAIN_RAM, reinterpret_cast<std::uintptr_t>(slots + v),
                                  sizeof(std::uint64_t));
  }
  const auto n = static_cast<std::uint32_t>(t.ops());
  const auto t0 = Clock::now();
  for (std::uint32_t i = 0; i < n; ++i) {
    starpu_task* task = starpu_task_create();
    task->cl = &g_codelet;
    const std::uint32_t* a = t.acc.data() + t.begin[i];
    const int na = static_cast<int>(t.begin[i + 1] - t.begin[i]);
    const int nr = t.n_reads[i];
    task->nbuffers = na;
    for (int k = 0; k < na; ++k) {
      STARPU_TASK_SET_HANDLE(task, handles[a[k]], k);
      STARPU_TASK_SET_MODE(task, k < nr ? STARPU_R : STARPU_RW, k);
    }
    task->cl_arg = reinterpret_cast<void*>(static_cast<std::uintptr_t>(i));
    const int rc = starpu_task_submit(task);
    if (rc != 0) throw std::runtime_error("starpu_task_submit failed: " + std::to_string(rc));
  }
  starpu_task_wait_for_all();
  const auto t1 = Clock::now();
  for (starpu_data_handle_t h : handles) starpu_data_unregister(h);
  return {std::chrono::duration<double>(t1 - t0).count(), 0};
}

void shutdown() { starpu_shutdown(); }

}  // namespace ordo_bench::peer
