// bench/workloads/figure.cpp - one figure, in-process or in a forked child.
#include "figure.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <thread>
#include <vector>

namespace ordo_bench {

namespace {

using Clock = std::chrono::steady_clock;

/// Busy CPU time of the whole machine so far (all cores, from /proc/stat).
double machine_busy_seconds() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return 0;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle, &iowait,
                            &irq, &softirq, &steal);
  std::fclose(f);
  if (n < 4) return 0;
  const unsigned long long busy = user + nice + system + irq + softirq + steal;
  return static_cast<double>(busy) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double cpu_seconds(const rusage& u) {
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

/// The answer line in a child's output (a peer's runtime may print other lines first).
std::string answer_line(const std::string& out) {
  std::size_t at = out.rfind("\nops=");
  at = at == std::string::npos ? (out.rfind("ops=", 0) == 0 ? 0 : std::string::npos) : at + 1;
  return at == std::string::npos ? std::string() : out.substr(at);
}

/// In the forked child: replaces this process by the peer's executable, its
/// stdout the pipe to the parent. Returns only if exec failed.
void exec_peer(const Job& job, const Progress& progress, const std::string& exe, int out_fd) {
  std::vector<std::string> args{exe, "--workload", job.workload, "--ops", std::to_string(job.ops),
                                "--runs", std::to_string(job.runs), "--spin", std::to_string(job.spin_iters),
                                "--label", job.workload + " " + job.engine.name};
  if (job.reference) {
    args.emplace_back("--reference");
    args.push_back(std::to_string(*job.reference));
  }
  if (progress.enabled()) {
    char t0[64];
    std::snprintf(t0, sizeof t0, "%.6f", progress.start_s());
    args.insert(args.end(), {"--progress", progress.position(), "--t0", t0});
    if (job.rounds > 0) args.insert(args.end(), {"--of", std::to_string(job.round) + "/" + std::to_string(job.rounds)});
  }
  for (const auto& a : job.engine.peer->args) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (dup2(out_fd, STDOUT_FILENO) < 0) return;
  execv(exe.c_str(), argv.data());
}

}  // namespace

/// Waits, at most `max_s` seconds, until the rest of the machine used less
/// than kQuietLoad cores over a one-second window (this process sleeps meanwhile).
void wait_until_quiet(double max_s, const Progress& progress, const std::string& label) {
  const auto give_up = Clock::now() + std::chrono::duration<double>(max_s);
  while (Clock::now() < give_up) {
    const double b0 = machine_busy_seconds();
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double load = (machine_busy_seconds() - b0) / std::chrono::duration<double>(Clock::now() - t0).count();
    if (load < kQuietLoad) return;
    char what[96];
    std::snprintf(what, sizeof what, ": waiting for a quiet machine (other load %.2f cores)", load);
    progress.show(label + what);
  }
}

/// Measures `job` in this process, on `trace` if given, else on a trace
/// generated here (so that a forked child's peak RSS includes it).
Measurement measure_here(const Job& job, const Progress& progress, const Trace* trace) {
  const std::string label = job.workload + " " + job.engine.name;
  try {
    std::optional<Trace> own;
    if (trace == nullptr) trace = &own.emplace(make_trace(job.workload, job.ops, job.spin_iters));
    return measure(job.engine, *trace, job.runs, job.reference, [&](int run, int runs) {
      if (job.rounds > 0) {
        run = job.round;
        runs = job.rounds;
      }
      progress.show(label + ": run " + std::to_string(run) + "/" + std::to_string(runs));
    });
  } catch (const std::exception& e) {
    Measurement m;
    m.error = std::string("exception:") + e.what();
    return m;
  }
}

/// Measures `job` in a forked child; its peak RSS comes from wait4().
Figure measure_in_child(const Job& job, const Progress& progress, double timeout_s) {
  Figure fig{.engine = job.engine.name, .workload = job.workload};
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    fig.m.error = "pipe_failed";
    return fig;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const double busy_before = machine_busy_seconds();
  const auto started = Clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    fig.m.error = "fork_failed";
    return fig;
  }
  if (pid == 0) {
    close(fds[0]);
    if (job.engine.peer) {
      exec_peer(job, progress, peer_executable(*job.engine.peer), fds[1]);
      _exit(127);
    }
    const std::string answer = serialize(measure_here(job, progress));
    std::size_t done = 0;
    while (done < answer.size()) {
      const ssize_t n = write(fds[1], answer.data() + done, answer.size() - done);
      if (n <= 0 && errno != EINTR) break;
      if (n > 0) done += static_cast<std::size_t>(n);
    }
    _exit(0);  // no static destructors, no flushing of the parent's buffers
  }
  close(fds[1]);

  std::string answer;
  bool timed_out = false;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child is done (or died)
    answer.append(buf, static_cast<std::size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);

  int status = 0;
  rusage usage{};
  while (wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  fig.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
  const double wall = std::chrono::duration<double>(Clock::now() - started).count();
  const double others = machine_busy_seconds() - busy_before - cpu_seconds(usage);
  if (wall > 0) fig.other_load = std::max(0.0, others / wall);

  if (timed_out) {
    fig.m = {};
    char what[64];
    std::snprintf(what, sizeof what, "timeout_after_%gs", timeout_s);
    fig.m.error = what;
  } else if (WIFSIGNALED(status)) {
    fig.m = {};
    fig.m.error = "child_killed_by_signal_" + std::to_string(WTERMSIG(status));
  } else if (!deserialize(answer_line(answer), fig.m)) {
    fig.m = {};
    fig.m.error = "child_exit_" + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "_no_answer";
  }
  if (!fig.m.error.empty()) fig.m.ok = false;
  return fig;
}

}  // namespace ordo_bench
