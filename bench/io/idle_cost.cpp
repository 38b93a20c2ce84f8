// bench/io/idle_cost.cpp - ordo_io_idle: what an idle process with pending
// requests costs (docs/io.md, "Idle cost").
//
//   ordo_io_idle [--case sleep|recv|none|takeover] [--seconds S] [--settle S] [--workers N]
//
// An engine with an io_uring Reactor, one request left pending: `sleep`, an
// ordo::sleep_for(engine, 1h) (a timeout in the ring); `recv`, a recv on an
// idle socketpair; `none`, nothing. After --settle seconds (default 1) it
// counts, over --seconds (default 3), the process's context switches (the
// voluntary and non-voluntary ones of every thread, /proc/self/task/*/status)
// and CPU time (getrusage), and the reactor's own wake-up counts
// (ReactorStats). Prints one line per figure, per second.
//
// `takeover`: the latency bound when every worker is busy. One worker, a
// recv pending; after --settle seconds of quiet, the worker leaves the ring
// for an op that sleeps 200 ms, and once it runs a byte is sent: the time
// until the reaper has consumed the recv's completion, --seconds rounds.
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "ordo/engine.hpp"
#include "ordo/io.hpp"
#include "ordo/task.hpp"
#include "ordo/timer.hpp"

namespace {

long context_switches() {
  long total = 0;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0 || line.rfind("nonvoluntary_ctxt_switches:", 0) == 0) {
        total += std::strtol(line.c_str() + line.find(':') + 1, nullptr, 10);
      }
    }
  }
  ::closedir(dir);
  return total;
}

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/// The `takeover` case: milliseconds from the send to the reaper's consumption, per round.
int takeover(double settle, int rounds) {
  ordo::Engine engine{ordo::Options{.cpu_workers = 1}};
  ordo::io::IoOptions options;
  options.backend = ordo::io::Backend::uring;
  ordo::io::Reactor io(engine, options);
  int sv[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    char byte = 0;
    std::atomic<bool> delivered{false};
    io.recv(sv[0], std::as_writable_bytes(std::span(&byte, 1))).then([&](const ordo::io::Result&) {
      delivered.store(true);
    });
    std::this_thread::sleep_for(std::chrono::duration<double>(settle));
    std::atomic<bool> started{false};
    engine.push_sync([&] {
      started.store(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }, ordo::Context::cpu(), {}, {});
    while (!started.load()) std::this_thread::yield();
    const std::uint64_t before = io.stats().by_reaper;
    const auto t0 = std::chrono::steady_clock::now();
    if (::send(sv[1], "x", 1, 0) != 1) return 1;
    while (io.stats().by_reaper == before) std::this_thread::yield();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    while (!delivered.load()) std::this_thread::yield();
  }
  engine.wait_for_all();
  std::sort(ms.begin(), ms.end());
  std::printf("RESULT case=takeover rounds=%d settle=%.1f reaper_takeover_ms median=%.2f min=%.2f max=%.2f\n", rounds,
              settle, ms[ms.size() / 2], ms.front(), ms.back());
  ::close(sv[0]);
  ::close(sv[1]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = "sleep";
  double seconds = 3;
  double settle = 1;
  unsigned workers = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--case" && i + 1 < argc) {
      which = argv[++i];
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--settle" && i + 1 < argc) {
      settle = std::atof(argv[++i]);
    } else if (a == "--workers" && i + 1 < argc) {
      workers = static_cast<unsigned>(std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--case sleep|recv|none|takeover] [--seconds S] [--settle S] [--workers N]\n",
                   argv[0]);
      return 2;
    }
  }
  if (which == "takeover") return takeover(settle, static_cast<int>(seconds));
  ordo::Engine engine{ordo::Options{.cpu_workers = workers}};
  ordo::io::IoOptions options;
  options.backend = ordo::io::Backend::uring;
  ordo::io::Reactor io(engine, options);
  std::stop_source stop;
  std::jthread sleeper;
  int sv[2] = {-1, -1};
  char byte = 0;
  ordo::io::Handle recv;
  if (which == "sleep") {
    sleeper = std::jthread([&] {
      try {
        ordo::sync_wait([&]() -> ordo::Task<void> { co_await ordo::sleep_for(engine, std::chrono::hours(1), stop.get_token()); }());
      } catch (const std::exception&) {  // cancelled at the end
      }
    });
  } else if (which == "recv") {
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
    recv = io.recv(sv[0], std::as_writable_bytes(std::span(&byte, 1))).then([](const ordo::io::Result&) {});
  } else if (which != "none") {
    std::fprintf(stderr, "unknown case '%s'\n", which.c_str());
    return 2;
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(settle));
  const ordo::io::ReactorStats s0 = io.stats();
  const long cs0 = context_switches();
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long cs1 = context_switches();
  const double cpu1 = cpu_seconds();
  const ordo::io::ReactorStats s1 = io.stats();
  // The measuring thread's own switches (its sleep, the /proc reads) are in
  // the count: a handful.
  std::printf("RESULT case=%s workers=%u seconds=%.2f ctxt_switches_per_s=%.1f cpu_ms_per_s=%.2f "
              "reaper_wakeups_per_s=%.1f worker_waits_per_s=%.1f in_ring=%d\n",
              which.c_str(), workers, dt, static_cast<double>(cs1 - cs0) / dt, (cpu1 - cpu0) * 1e3 / dt,
              static_cast<double>(s1.reaper_wakeups - s0.reaper_wakeups) / dt,
              static_cast<double>(s1.worker_waits - s0.worker_waits) / dt, io.idle_workers_reap() ? 1 : 0);
  stop.request_stop();
  if (which == "recv") (void)recv.cancel();
  if (sleeper.joinable()) sleeper.join();
  if (sv[0] >= 0) {
    ::close(sv[0]);
    ::close(sv[1]);
  }
  return 0;
}
