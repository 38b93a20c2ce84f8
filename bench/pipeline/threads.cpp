// bench/pipeline/threads.cpp - a std::thread pool written the obvious way:
// N threads pull the next file from an atomic index, read it with plain
// blocking syscalls, count into a histogram of their own; the histograms
// are merged once the threads are joined.
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "pipeline_bench.hpp"

namespace pipebench {

Hist run_threads(const Job& job, Stopwatch& sw, const void* arg) {
  const unsigned n = *static_cast<const unsigned*>(arg);
  std::vector<Hist> hists(n, Hist{});
  std::atomic<std::size_t> next{0};
  std::mutex m;
  std::exception_ptr error;
  sw.start();  // the threads are started inside the timed part: that is what the obvious version does
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < n; ++t) {
    pool.emplace_back([&, t] {
      try {
        for (std::size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < job.paths.size();) {
          if (job.mode == Mode::direct) {
            const Aligned a = read_plain_direct(job.paths[i]);
            process(job, a.text(), hists[t]);
          } else {
            const std::string text = read_plain(job.paths[i]);
            process(job, text, hists[t]);
          }
        }
      } catch (...) {
        std::lock_guard lock(m);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (std::thread& th : pool) th.join();
  Hist total{};
  for (const Hist& h : hists) merge(total, h);
  sw.stop();
  if (error) std::rethrow_exception(error);
  return total;
}

}  // namespace pipebench
