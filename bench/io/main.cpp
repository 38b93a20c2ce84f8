// bench/io/main.cpp - ordo_io_bench: ordo::io against fio and Asio.
//
//   ordo_io_bench [--workload randread,blocked,echo] [--runs R] [--direct-runs R]
//                 [--seconds S] [--dir D] [--file-mib M] [--depths 1,32,128] [--modes buffered,direct]
//                 [--conns 1,64,1024]
//                 [--backends uring,threads] [--quick] [--verbose] [--write-docs [PATH]]
//
// Workloads (see each file): randread.cpp (4 KiB random reads, fio beside
// ordo ops and coroutines), blocked.cpp (CPU ops with 1,000 slow reads
// outstanding), echo.cpp (loopback TCP echo, ordo::io beside Asio).
// Prints one `RESULT engine=... workload=... ok=0|1` line per figure and the
// Markdown tables; --write-docs writes them to docs/io-bench.md. Progress
// goes to stderr when stdout is a terminal (--verbose: timestamped lines,
// always); piped, only results are printed.
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "io_bench.hpp"

namespace iobench {

double Figure::median() const {
  if (runs.empty()) return 0;
  std::vector<double> v = runs;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}
double Figure::min() const { return runs.empty() ? 0 : *std::min_element(runs.begin(), runs.end()); }
double Figure::max() const { return runs.empty() ? 0 : *std::max_element(runs.begin(), runs.end()); }

Figure paired_ratios(const Figure& fig, const Figure& base) {
  Figure ratios;
  for (std::size_t r = 0; r < fig.runs.size() && r < base.runs.size(); ++r) {
    ratios.runs.push_back(base.runs[r] > 0 ? fig.runs[r] / base.runs[r] : 0);
  }
  return ratios;
}

const char* backend_name(ordo::io::Backend b) {
  switch (b) {
    case ordo::io::Backend::uring: return "uring";
    case ordo::io::Backend::threads: return "threads";
    case ordo::io::Backend::automatic: return "auto";
  }
  return "?";
}

void print_result(const Row& row) {
  std::printf("RESULT engine=%s workload=%s unit=%s median=%.0f min=%.0f max=%.0f runs=%zu%s%s ok=%d\n",
              row.engine.c_str(), row.workload.c_str(), row.unit.c_str(), row.fig.median(), row.fig.min(),
              row.fig.max(), row.fig.runs.size(), row.extra.empty() ? "" : " ", row.extra.c_str(), row.ok ? 1 : 0);
  std::fflush(stdout);
}

void progress(const Config& cfg, const std::string& what) {
  static const Clock::time_point start = Clock::now();
  if (cfg.verbose) {
    std::fprintf(stderr, "[%7.2f s] %s\n", std::chrono::duration<double>(Clock::now() - start).count(), what.c_str());
  } else if (cfg.progress) {
    std::fprintf(stderr, "\r\033[K.. %s", what.c_str());
  }
}

std::string seconds_text(const Config& cfg) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", cfg.seconds);
  return buf;
}

std::string human(double v) {
  char buf[32];
  if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  } else if (v >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.0fk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  }
  return buf;
}

unsigned long raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  return static_cast<unsigned long>(rl.rlim_cur);
}

}  // namespace iobench

namespace {

std::vector<unsigned> numbers(const std::string& s) {
  std::vector<unsigned> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');) out.push_back(static_cast<unsigned>(std::stoul(x)));
  return out;
}

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');) out.push_back(x);
  return out;
}

std::string command_output(const char* cmd) {
  std::string out;
  if (std::FILE* p = ::popen(cmd, "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  using namespace iobench;
  Config cfg;
  if (const char* t = std::getenv("TMPDIR"); t != nullptr && *t != '\0') cfg.dir = t;
  if (cfg.dir.empty()) cfg.dir = "/var/tmp";
  std::vector<std::string> workloads{"randread", "blocked", "echo"};
  std::vector<std::string> backends{"uring", "threads"};
  std::string docs;
  std::string args;
  for (int i = 1; i < argc; ++i) args += std::string(" ") + argv[i];
  // --quick first, so explicit options given with it still win.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") {
      cfg.quick = true;
      cfg.runs = 1;
      cfg.seconds = 0.2;
      cfg.file_bytes = std::size_t{64} << 20;
      cfg.depths = {1, 32};
      cfg.conns = {1, 64};
      cfg.cpu_ops = 10'000;
      cfg.slow_reads = 100;
      cfg.late_ms = 50;
    }
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&] {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--quick") continue;
    if (a == "--verbose") {
      cfg.verbose = true;
      continue;
    }
    if (a == "--workload") workloads = words(val());
    else if (a == "--runs") cfg.runs = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--direct-runs") cfg.direct_runs = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--seconds") cfg.seconds = std::stod(val());
    else if (a == "--dir") cfg.dir = val();
    else if (a == "--file-mib") cfg.file_bytes = std::stoull(val()) << 20;
    else if (a == "--depths") cfg.depths = numbers(val());
    else if (a == "--modes") {
      cfg.direct.clear();
      for (const std::string& m : words(val())) {
        if (m != "buffered" && m != "direct") throw std::invalid_argument("--modes takes buffered and/or direct, not " + m);
        cfg.direct.push_back(m == "direct");
      }
    } else if (a == "--conns") cfg.conns = numbers(val());
    else if (a == "--backends") backends = words(val());
    else if (a == "--write-docs") docs = (i + 1 < argc && argv[i + 1][0] != '-') ? val() : std::string(ORDO_SOURCE_DIR) + "/docs/io-bench.md";
    else {
      std::fprintf(stderr,
                   "usage: ordo_io_bench [--workload randread,blocked,echo] [--runs R] [--direct-runs R] [--seconds S]\n"
                   "                     [--dir D] [--file-mib M] [--depths 1,32,128] [--modes buffered,direct]\n"
                   "                     [--conns 1,64,1024]\n"
                   "                     [--backends uring,threads] [--quick] [--verbose] [--write-docs [PATH]]\n");
      return 2;
    }
  }
  if (cfg.runs == 0) throw std::invalid_argument("--runs must be at least 1");
  // O_DIRECT cells: a disk's speed swings more from one second to the next
  // than the page cache's, so a 10% difference needs more runs there
  // (docs/io.md, "How bench/io treats the disk").
  if (cfg.direct_runs == 0) cfg.direct_runs = cfg.quick ? cfg.runs : 2 * cfg.runs;
  for (const std::string& b : backends) {
    if (b == "uring") {
      // Probe: a build or kernel without io_uring measures the thread backend only.
      try {
        ordo::Engine probe_engine(ordo::Options{.kind = ordo::EngineKind::pooled, .cpu_workers = 1});
        ordo::io::Reactor probe(probe_engine, ordo::io::IoOptions{.backend = ordo::io::Backend::uring, .log = [](std::string_view) {}});
        cfg.backends.push_back(ordo::io::Backend::uring);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ordo_io_bench: no io_uring backend (%s): measuring the thread backend only\n", e.what());
      }
    } else if (b == "threads") {
      cfg.backends.push_back(ordo::io::Backend::threads);
    } else {
      throw std::invalid_argument("--backends takes uring and/or threads, not " + b);
    }
  }
  cfg.progress = ::isatty(STDOUT_FILENO) != 0;
  const unsigned long fds = raise_fd_limit();
  if (fds < 2 * 1024 + 64) std::fprintf(stderr, "ordo_io_bench: only %lu file descriptors: 1,024 connections may fail\n", fds);

  utsname un{};
  ::uname(&un);
  const std::string fio_version = command_output("fio --version 2>/dev/null");
  const std::string revision = command_output(("git -C " + std::string(ORDO_SOURCE_DIR) + " rev-parse --short HEAD 2>/dev/null").c_str());
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));

  std::string md;
  std::vector<Row> rows;
  for (const std::string& w : workloads) {
    std::vector<Row> more;
    if (w == "randread") more = run_randread(cfg, md);
    else if (w == "blocked") more = run_blocked(cfg, md);
    else if (w == "echo") more = run_echo(cfg, md);
    else throw std::invalid_argument("unknown workload " + w + " (randread, blocked, echo)");
    rows.insert(rows.end(), more.begin(), more.end());
  }
  if (cfg.progress) std::fprintf(stderr, "\r\033[K");

  std::ostringstream head;
  head << "# ordo::io benchmarks\n\n"
       << "<!-- Generated by bench/io (ordo_io_bench --write-docs); edit the notes in docs/io.md, not here. -->\n\n"
       << "Measured " << date << " at revision " << (revision.empty() ? "?" : revision) << " on " << un.sysname << " "
       << un.release << ", " << std::thread::hardware_concurrency() << " hardware threads"
       << (fio_version.empty() ? "" : ", " + fio_version) << ". Command: `ordo_io_bench" << args << "` (Release).\n\n";
  std::printf("\n%s%s", head.str().c_str(), md.c_str());
  if (!docs.empty()) {
    std::ofstream out(docs);
    out << head.str() << md;
    if (!out) throw std::runtime_error("cannot write " + docs);
    std::fprintf(stderr, "ordo_io_bench: wrote %s\n", docs.c_str());
  }
  const bool all_ok = std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.ok; });
  return all_ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ordo_io_bench: %s\n", e.what());
  return 1;
}
