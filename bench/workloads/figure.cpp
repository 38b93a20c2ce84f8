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
#include <sstream>
#include <string_view>
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

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  for (std::size_t start = 0; start <= s.size();) {
    const auto comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.emplace_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::string no_spaces(std::string s) {
  for (char& ch : s) {
    if (ch == ' ' || ch == '\n' || ch == '\t') ch = '_';
  }
  return s.empty() ? "-" : s;
}

/// The child's answer to the parent: one line of key=value fields.
std::string serialize(const Measurement& m) {
  std::ostringstream out;
  out.precision(17);
  out << "ops=" << m.ops << " digest=" << m.digest << " ok=" << m.ok << " workers=" << m.workers
      << " newvar=" << m.new_variable_ns << " error=" << no_spaces(m.error) << " secs=";
  for (std::size_t i = 0; i < m.seconds.size(); ++i) out << (i ? "," : "") << m.seconds[i];
  out << "\n";
  return out.str();
}

bool deserialize(const std::string& line, Measurement& m) try {
  std::istringstream in(line);
  bool complete = false;
  for (std::string field; in >> field;) {
    const auto eq = field.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = field.substr(0, eq);
    const std::string value = field.substr(eq + 1);
    if (key == "ops") m.ops = std::stoull(value);
    if (key == "digest") m.digest = std::stoull(value);
    if (key == "ok") m.ok = value == "1";
    if (key == "workers") m.workers = static_cast<unsigned>(std::stoul(value));
    if (key == "newvar") m.new_variable_ns = std::stod(value);
    if (key == "error") m.error = value == "-" ? "" : value;
    if (key == "secs") {
      for (const auto& s : split_commas(value)) m.seconds.push_back(std::stod(s));
      complete = true;
    }
  }
  return complete;
} catch (const std::exception&) {  // a garbled answer (std::stoull and friends)
  return false;
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
  } else if (!deserialize(answer, fig.m)) {
    fig.m = {};
    fig.m.error = "child_exit_" + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "_no_answer";
  }
  if (!fig.m.error.empty()) fig.m.ok = false;
  return fig;
}

}  // namespace ordo_bench
