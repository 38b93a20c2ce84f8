// bench/pipeline/main.cpp - ordo_pipeline_bench: the file pipeline of issue
// 32 (N files read, words counted, counts merged into one histogram) on
// ordo beside a plain serial loop and a std::thread pool, in one run.
//
//   ordo_pipeline_bench [--files N] [--min-kib K] [--max-kib K] [--rounds R] [--limits 2,4]
//                       [--threads T] [--modes warm,direct,nowork] [--nowork-files N]
//                       [--nowork-kib K] [--only serial,ordo-for_each-4,...] [--dir D] [--seed S] [--quick]
//   ORDO_IO_BACKEND=threads|uring, ORDO_CPU_WORKERS=... apply to the ordo variants.
//
// Generates the files (sizes log-uniform in [min, max], seeded; lowercase
// words) in a fresh directory under D (default $TMPDIR, else /var/tmp), then
// per table runs every variant once per round, the order rotated by one each
// round, after one warm-up round that is not counted. Every variant's
// histogram is compared with the serial loop's: a mismatch ends the run
// with exit status 1. Prints Markdown: medians over rounds (min-max), speed-ups and CPU ratios as the
// median of the per-round ratios to the serial run of the same round, and
// the fastest rounds' ratio (fastest serial over fastest variant: on a
// machine shared with other work, the runs least disturbed). "met?" is
// decided on the medians.
//
// Tables: warm (page cache: every file was read in the round before),
// direct (O_DIRECT into aligned buffers: from the device, whatever the
// cache holds), nowork (many small files, nothing counted: the per-file
// cost of reading plus, for ordo, the two ops, against plain read()).
#include <fcntl.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include <ordo/options.hpp>

#include "pipeline_bench.hpp"

namespace pipebench {

namespace {

/// Process CPU time (every thread, user and system) and minor faults so far.
void usage_now(double& cpu_ms, double& faults) {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3; };
  cpu_ms = ms(ru.ru_utime) + ms(ru.ru_stime);
  faults = static_cast<double>(ru.ru_minflt);
}

}  // namespace

void Stopwatch::start() noexcept {
  usage_now(cpu0_, faults0_);
  t0_ = Clock::now();
}
void Stopwatch::stop() noexcept {
  wall_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - t0_).count();
  double cpu = 0, faults = 0;
  usage_now(cpu, faults);
  cpu_ms_ = cpu - cpu0_;
  faults_ = faults - faults0_;
}

namespace {

struct Config {
  std::size_t files = 200;
  std::size_t min_kib = 4;
  std::size_t max_kib = 4096;
  unsigned rounds = 7;
  std::vector<std::size_t> limits{2, 4};
  unsigned threads = 0;  ///< 0: one per usable CPU
  std::vector<std::string> modes{"warm", "direct", "nowork"};
  std::size_t nowork_files = 2000;
  std::size_t nowork_kib = 4;
  std::string dir;
  std::uint64_t seed = 2026;
  std::vector<std::string> only;  ///< variant names to run (the serial loop always runs: the reference)
};

std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// `bytes` of text: words of 1-12 letters from a 16-letter alphabet (so
/// words repeat), separated by a space or, one time in 12, a newline.
std::string make_text(std::size_t bytes, std::uint64_t& rng) {
  std::string s;
  s.reserve(bytes);
  while (s.size() < bytes) {
    std::uint64_t r = splitmix(rng);
    const std::size_t len = 1 + r % 12;
    r >>= 4;
    for (std::size_t i = 0; i < len && s.size() < bytes; ++i, r >>= 4) s.push_back(static_cast<char>('a' + (r & 15)));
    if (s.size() < bytes) s.push_back(splitmix(rng) % 12 == 0 ? '\n' : ' ');
  }
  return s;
}

/// Writes the files; returns the job (paths and total bytes).
Job make_files(const std::string& dir, const std::string& prefix, std::size_t n, std::size_t min_bytes,
               std::size_t max_bytes, std::uint64_t seed) {
  Job job;
  std::uint64_t rng = seed;
  const double lo = std::log(static_cast<double>(min_bytes)), hi = std::log(static_cast<double>(max_bytes));
  for (std::size_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(splitmix(rng) >> 11) / 9007199254740992.0;
    const auto bytes = static_cast<std::size_t>(std::exp(lo + (hi - lo) * u));
    const std::string text = make_text(bytes, rng);
    job.paths.push_back(dir + "/" + prefix + std::to_string(i) + ".txt");
    std::ofstream f(job.paths.back(), std::ios::binary);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!f) throw std::runtime_error("cannot write " + job.paths.back());
    job.bytes += text.size();
  }
  return job;
}

struct Sample {
  double wall_ms, cpu_ms, faults;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string load_text() {
  double l[3] = {0, 0, 0};
  if (::getloadavg(l, 3) != 3) return "?";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "?";
}

std::string git_rev() {
#ifdef ORDO_SOURCE_DIR
  std::FILE* p = ::popen("git -C " ORDO_SOURCE_DIR " rev-parse --short HEAD 2>/dev/null", "r");
  if (p == nullptr) return "?";
  char buf[64] = {};
  const bool ok = std::fgets(buf, sizeof buf, p) != nullptr;
  ::pclose(p);
  if (!ok) return "?";
  std::string s = buf;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
#else
  return "?";
#endif
}

bool has(const std::vector<std::string>& v, const char* x) { return std::find(v.begin(), v.end(), x) != v.end(); }

/// The variants in table order; the first is the serial loop.
std::vector<Variant> variants(const Config& cfg, const unsigned& threads, std::vector<OrdoArgs>& args) {
  std::vector<Variant> v;
  v.push_back({"serial", "one thread: open, fstat, read, close, count, merge; file after file", &run_serial});
  v.push_back({"threads-" + std::to_string(threads),
               std::to_string(threads) + " std::threads pulling files by an atomic index, a histogram each, merged at the end",
               &run_threads, &threads});
  args.reserve(3 + 2 * cfg.limits.size());  // the variants point into it
  args.push_back({OrdoArgs::Shape::unbounded, 0});
  v.push_back({"ordo-unbounded", "every file's coroutine started at once (when_all)", &run_ordo, &args.back()});
  for (std::size_t l : cfg.limits) {
    args.push_back({OrdoArgs::Shape::bounded, l});
    v.push_back({"ordo-for_each-" + std::to_string(l), "ordo::for_each(paths, " + std::to_string(l) + ", ...)",
                 &run_ordo, &args.back()});
  }
  for (std::size_t l : cfg.limits) {
    args.push_back({OrdoArgs::Shape::channels, l});
    v.push_back({"ordo-channels-" + std::to_string(l),
                 "read -> parse -> reduce over ordo::Channels: " + std::to_string(l) + " readers (for_each), " +
                     std::to_string(l) + " parsers, 1 reducer",
                 &run_ordo, &args.back()});
  }
  args.push_back({OrdoArgs::Shape::read_only, cfg.limits.back()});
  v.push_back({"ordo-read-only-" + std::to_string(cfg.limits.back()),
               "for_each(paths, " + std::to_string(cfg.limits.back()) + ", read_file): the I/O alone, no ops",
               &run_ordo, &args.back(), /*in_work=*/false, /*in_nowork=*/true});
  return v;
}

/// Runs one table: a warm-up round, then cfg.rounds rounds; returns the
/// samples per variant (index as in `vs`); throws on a wrong histogram.
std::vector<std::vector<Sample>> measure(const Config& cfg, const std::vector<Variant>& vs, const Job& job,
                                         const char* table) {
  std::vector<std::vector<Sample>> out(vs.size());
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < vs.size(); ++i) {
    const bool chosen = i == 0 || cfg.only.empty() || has(cfg.only, vs[i].name.c_str());
    if (chosen && (job.work ? vs[i].in_work : vs[i].in_nowork)) order.push_back(i);
  }
  Hist expected{};
  for (unsigned r = 0; r <= cfg.rounds; ++r) {
    // Round 0 warms up (and fills the page cache); the serial loop goes
    // first there, to give the expected histogram.
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t i = order[r == 0 ? k : (k + r) % order.size()];
      Stopwatch sw;
      const Hist h = vs[i].run(job, sw, vs[i].arg);
      if (r == 0 && i == 0) {
        expected = h;
      } else if (h != expected) {
        // Thrown, not aborted: the files are removed on the way out; main returns 1.
        throw std::runtime_error(std::string(table) + ", " + vs[i].name + ": the histogram differs from the serial loop's");
      }
      if (r > 0) out[i].push_back({sw.wall_ms(), sw.cpu_ms(), sw.faults()});
    }
    if (::isatty(2) != 0) std::fprintf(stderr, "\r\033[K%s: round %u of %u", table, r, cfg.rounds);
  }
  if (::isatty(2) != 0) std::fprintf(stderr, "\n");
  return out;
}

/// Per-round ratio num(sample)/den(sample) of variant i over serial, median.
double ratio(const std::vector<Sample>& v, const std::vector<Sample>& serial, double Sample::*f, bool serial_over) {
  std::vector<double> r;
  for (std::size_t k = 0; k < v.size() && k < serial.size(); ++k) {
    r.push_back(serial_over ? serial[k].*f / v[k].*f : v[k].*f / serial[k].*f);
  }
  return median(r);
}

std::string range(const std::vector<Sample>& v, double Sample::*f, double scale, const char* format) {
  std::vector<double> x;
  for (const Sample& s : v) x.push_back(s.*f * scale);
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  return fmt(format, median(x)) + " (" + fmt(format, *lo) + "-" + fmt(format, *hi) + ")";
}

struct Summary {
  double best_bounded_speedup = 0;
  double best_bounded_speedup_min = 0;  ///< of the fastest rounds
  std::string best_bounded;
  double bounded_cpu_ratio = 0;
  double overhead_us = -1;
  double overhead_us_min = 0;  ///< of the fastest rounds
  std::string overhead_variant;
};

double min_of(const std::vector<Sample>& v, double Sample::*f) {
  double m = v.empty() ? 0 : v.front().*f;
  for (const Sample& x : v) m = std::min(m, x.*f);
  return m;
}

void work_table(const std::vector<Variant>& vs, const std::vector<std::vector<Sample>>& s, bool warm, Summary& sum) {
  std::printf("| variant | wall ms, median (min-max) | speed-up vs serial | fastest rounds' speed-up | CPU ms, median "
              "(min-max) | CPU / serial | page faults (median) |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (std::size_t i = 0; i < vs.size(); ++i) {
    if (s[i].empty()) continue;
    const double up = ratio(s[i], s[0], &Sample::wall_ms, true);
    const double cpu = ratio(s[i], s[0], &Sample::cpu_ms, false);
    std::vector<double> faults;
    for (const Sample& x : s[i]) faults.push_back(x.faults);
    const double up_min = min_of(s[0], &Sample::wall_ms) / min_of(s[i], &Sample::wall_ms);
    std::printf("| %s | %s | %.2fx | %.2fx | %s | %.2f | %.0f |\n", vs[i].name.c_str(),
                range(s[i], &Sample::wall_ms, 1, "%.1f").c_str(), up, up_min,
                range(s[i], &Sample::cpu_ms, 1, "%.1f").c_str(), cpu, median(faults));
    if (warm && vs[i].name.rfind("ordo-for_each-", 0) == 0 && up > sum.best_bounded_speedup) {
      sum.best_bounded_speedup = up;
      sum.best_bounded_speedup_min = up_min;
      sum.best_bounded = vs[i].name;
      sum.bounded_cpu_ratio = cpu;
    }
  }
}

void nowork_table(const std::vector<Variant>& vs, const std::vector<std::vector<Sample>>& s, std::size_t files,
                  Summary& sum) {
  std::printf("| variant | wall us per file, median (min-max) | over serial, us per file | fastest rounds: over serial "
              "| CPU us per file | CPU over serial, us per file |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  const double per = 1000.0 / static_cast<double>(files);
  for (std::size_t i = 0; i < vs.size(); ++i) {
    if (s[i].empty()) continue;
    std::vector<double> dw, dc;
    for (std::size_t k = 0; k < s[i].size() && k < s[0].size(); ++k) {
      dw.push_back((s[i][k].wall_ms - s[0][k].wall_ms) * per);
      dc.push_back((s[i][k].cpu_ms - s[0][k].cpu_ms) * per);
    }
    const double dw_min = (min_of(s[i], &Sample::wall_ms) - min_of(s[0], &Sample::wall_ms)) * per;
    std::printf("| %s | %s | %+.2f | %+.2f | %s | %+.2f |\n", vs[i].name.c_str(),
                range(s[i], &Sample::wall_ms, per, "%.2f").c_str(), median(dw), dw_min,
                range(s[i], &Sample::cpu_ms, per, "%.2f").c_str(), median(dc));
    if (vs[i].name.rfind("ordo-for_each-", 0) == 0 && (sum.overhead_us < 0 || median(dw) < sum.overhead_us)) {
      sum.overhead_us = median(dw);
      sum.overhead_us_min = dw_min;
      sum.overhead_variant = vs[i].name;
    }
  }
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) {
    if (!x.empty()) out.push_back(x);
  }
  return out;
}

Config parse(int argc, char** argv) {
  Config cfg;
  if (const char* t = std::getenv("TMPDIR"); t != nullptr && *t != '\0') cfg.dir = t;
  if (cfg.dir.empty()) cfg.dir = "/var/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      cfg.files = 40;
      cfg.max_kib = 256;
      cfg.rounds = 2;
      cfg.nowork_files = 200;
      continue;
    }
    if (a == "--help" || a == "-h") throw std::invalid_argument("");
    if (i + 1 >= argc) throw std::invalid_argument(a + ": unknown option or missing value");
    const std::string v = argv[++i];
    if (a == "--files") cfg.files = std::stoul(v);
    else if (a == "--min-kib") cfg.min_kib = std::stoul(v);
    else if (a == "--max-kib") cfg.max_kib = std::stoul(v);
    else if (a == "--rounds") cfg.rounds = static_cast<unsigned>(std::stoul(v));
    else if (a == "--threads") cfg.threads = static_cast<unsigned>(std::stoul(v));
    else if (a == "--nowork-files") cfg.nowork_files = std::stoul(v);
    else if (a == "--nowork-kib") cfg.nowork_kib = std::stoul(v);
    else if (a == "--dir") cfg.dir = v;
    else if (a == "--seed") cfg.seed = std::stoull(v);
    else if (a == "--modes") cfg.modes = split(v);
    else if (a == "--only") cfg.only = split(v);
    else if (a == "--limits") {
      cfg.limits.clear();
      for (const std::string& x : split(v)) cfg.limits.push_back(std::stoul(x));
    } else {
      throw std::invalid_argument("unknown option " + a);
    }
  }
  if (cfg.files == 0 || cfg.min_kib == 0 || cfg.max_kib < cfg.min_kib || cfg.rounds == 0 || cfg.limits.empty() ||
      cfg.nowork_files == 0 || cfg.nowork_kib == 0) {
    throw std::invalid_argument("--files, --rounds, --limits, --nowork-*: at least 1; --max-kib >= --min-kib");
  }
  for (std::size_t l : cfg.limits) {
    if (l == 0) throw std::invalid_argument("--limits: each at least 1");
  }
  for (const std::string& m : cfg.modes) {
    if (m != "warm" && m != "direct" && m != "nowork") throw std::invalid_argument("--modes: warm, direct, nowork");
  }
  return cfg;
}

/// Whether the file system under `path` takes O_DIRECT (tmpfs refuses it).
bool direct_ok(const std::string& path, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0) {
    why = std::strerror(errno);
    return false;
  }
  ::close(fd);
  return true;
}

std::string fs_type(const std::string& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0) return "?";
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0x01021994UL: return "tmpfs";
    case 0xEF53UL: return "ext4";
    case 0x58465342UL: return "xfs";
    case 0x9123683EUL: return "btrfs";
    case 0x794C7630UL: return "overlayfs";
    default: return "other";
  }
}

int run(int argc, char** argv) {
  const Config cfg = parse(argc, argv);
  const unsigned threads = cfg.threads != 0 ? cfg.threads : ordo::usable_cpus();
  std::vector<OrdoArgs> args;
  const std::vector<Variant> vs = variants(cfg, threads, args);

  namespace fs = std::filesystem;
  const fs::path dir = fs::path(cfg.dir) / ("ordo_pipeline_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};

  const std::string load_before = load_text();
  const auto t_start = Clock::now();
  std::fprintf(stderr, "writing the files under %s ...\n", dir.c_str());
  Job work;
  if (has(cfg.modes, "warm") || has(cfg.modes, "direct")) {
    work = make_files(dir.string(), "f", cfg.files, cfg.min_kib * 1024, cfg.max_kib * 1024, cfg.seed);
  }
  Job nowork;
  if (has(cfg.modes, "nowork")) {
    nowork = make_files(dir.string(), "s", cfg.nowork_files, cfg.nowork_kib * 1024, cfg.nowork_kib * 1024, cfg.seed + 1);
    nowork.work = false;
  }
  ::sync();  // O_DIRECT reads of dirty pages would write them back first

  utsname un{};
  ::uname(&un);
  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::printf("## ordo_pipeline_bench\n\n");
  std::printf("- date: %s; sources: git %s\n", date, git_rev().c_str());
  std::printf("- machine: %u hardware threads, %u usable; %s; %s %s\n", std::thread::hardware_concurrency(),
              ordo::usable_cpus(), cpu_model().c_str(), un.sysname, un.release);
  std::printf("- command:");
  for (int i = 0; i < argc; ++i) std::printf(" %s", argv[i]);
  std::printf("\n- files in %s (%s)\n", dir.c_str(), fs_type(dir.string()).c_str());
  std::printf("- %u rounds per table after one warm-up round; the variants' order rotates by one each round\n",
              cfg.rounds);
  std::printf("- ordo: `Engine(Options::from_env())` (%u CPU workers unless ORDO_CPU_WORKERS says otherwise), "
              "`io::Reactor(engine, IoOptions::from_env())`, made before the timed part\n",
              ordo::usable_cpus());
  std::printf("- load average (1/5/15 min) before: %s\n\n", load_before.c_str());
  std::printf("Variants:\n\n");
  for (const Variant& v : vs) std::printf("- `%s`: %s\n", v.name.c_str(), v.what.c_str());
  std::printf("\n");

  Summary sum;
  if (has(cfg.modes, "warm")) {
    const auto s = measure(cfg, vs, work, "warm");
    std::printf("### Warm: %zu files, %.1f MiB (%zu KiB - %zu KiB, log-uniform), page cache\n\n", work.paths.size(),
                static_cast<double>(work.bytes) / (1024.0 * 1024.0), cfg.min_kib, cfg.max_kib);
    work_table(vs, s, true, sum);
    std::printf("\n");
    std::fflush(stdout);
  }
  if (has(cfg.modes, "direct")) {
    std::string why;
    if (!direct_ok(work.paths.front(), why)) {
      std::printf("### O_DIRECT: skipped: the file system under %s refuses O_DIRECT (%s); "
                  "give --dir a disk-backed directory\n\n", dir.c_str(), why.c_str());
    } else {
      Job direct = work;
      direct.mode = Mode::direct;
      const auto s = measure(cfg, vs, direct, "direct");
      std::printf("### O_DIRECT: the same files, read with O_DIRECT into 4 KiB-aligned buffers\n\n");
      work_table(vs, s, false, sum);
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  if (has(cfg.modes, "nowork")) {
    const auto s = measure(cfg, vs, nowork, "nowork");
    std::printf("### Per-file overhead: %zu files of %zu KiB, page cache, nothing counted\n\n", nowork.paths.size(),
                cfg.nowork_kib);
    std::printf("Each file is read; ordo's variants still push the two ops per file (count, merge) with "
                "bodies that only add up the bytes. \"over serial\": (variant - serial) / files, per round, median.\n\n");
    nowork_table(vs, s, nowork.paths.size(), sum);
    std::printf("\n");
  }

  std::printf("### Issue 32's targets\n\n| target | measured | met? |\n|---|---:|:-:|\n");
  if (!sum.best_bounded.empty()) {
    std::printf("| warm, bounded helper >= 1.6x the serial loop | %.2fx (%s; fastest rounds %.2fx) | %s |\n",
                sum.best_bounded_speedup, sum.best_bounded.c_str(), sum.best_bounded_speedup_min,
                sum.best_bounded_speedup >= 1.6 ? "yes" : "**no**");
    std::printf("| warm, process CPU <= 1.3x serial's | %.2f (%s) | %s |\n", sum.bounded_cpu_ratio,
                sum.best_bounded.c_str(), sum.bounded_cpu_ratio <= 1.3 ? "yes" : "**no**");
  }
  if (sum.overhead_us > -1) {
    std::printf("| per-file overhead <= 3 us over a plain read() loop | %+.2f us (%s; fastest rounds %+.2f us) | %s |\n",
                sum.overhead_us, sum.overhead_variant.c_str(), sum.overhead_us_min,
                sum.overhead_us <= 3 ? "yes" : "**no**");
  }
  std::printf("\n- load average (1/5/15 min) after: %s; total wall time %.0f s\n", load_text().c_str(),
              std::chrono::duration<double>(Clock::now() - t_start).count());
  return 0;
}

}  // namespace

}  // namespace pipebench

int main(int argc, char** argv) {
  try {
    return pipebench::run(argc, argv);
  } catch (const std::invalid_argument& e) {
    if (*e.what() != '\0') std::fprintf(stderr, "ordo_pipeline_bench: %s\n", e.what());
    std::fprintf(stderr,
                 "usage: ordo_pipeline_bench [--files N] [--min-kib K] [--max-kib K] [--rounds R] [--limits 2,4]\n"
                 "         [--threads T] [--modes warm,direct,nowork] [--nowork-files N] [--nowork-kib K]\n"
                 "         [--only VARIANT,...]\n"
                 "         [--dir D] [--seed S] [--quick]\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ordo_pipeline_bench: %s\n", e.what());
    return 1;
  }
}
