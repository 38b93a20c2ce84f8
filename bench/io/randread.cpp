// bench/io/randread.cpp - 4 KiB random reads from one warm file: fio
// (ioengine=io_uring) beside ordo::io, as engine ops (Reactor::push_read, one
// buffer variable per lane: the engine keeps `depth` reads in flight) and as
// coroutines (`depth` coroutines, each `co_await io.read` in a loop), at each
// queue depth, buffered and O_DIRECT. Runs interleave: run r of every engine
// comes before run r+1 of any, starting with a different engine each time.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "io_bench.hpp"
#include "ordo/coro.hpp"
#include "ordo/ordo.hpp"

namespace iobench {
namespace {

constexpr std::size_t kBlock = 4096;

/// Every block starts with its own index: a read that returned the wrong
/// block (or nothing) is caught by one compare.
bool block_ok(const std::byte* buf, std::uint64_t offset) {
  std::uint64_t stamp = 0;
  std::memcpy(&stamp, buf, sizeof stamp);
  return stamp == offset / kBlock;
}

std::string file_path(const Config& cfg) {
  return cfg.dir + "/ordo_io_bench_" + std::to_string(cfg.file_bytes >> 20) + "MiB.dat";
}

/// Creates the file if it is missing (or of another size), then reads it
/// whole so that it sits in the page cache; returns the cached fraction.
double prepare_file(const Config& cfg) {
  const std::string path = file_path(cfg);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  off_t size = fd >= 0 ? ::lseek(fd, 0, SEEK_END) : -1;
  if (fd < 0 || size != static_cast<off_t>(cfg.file_bytes)) {
    if (fd >= 0) ::close(fd);
    progress(cfg, "creating " + path);
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "create " + path);
    std::vector<std::byte> chunk(1 << 20);
    for (std::size_t off = 0; off < cfg.file_bytes; off += chunk.size()) {
      for (std::size_t b = 0; b < chunk.size(); b += kBlock) {
        const std::uint64_t stamp = (off + b) / kBlock;
        std::memcpy(chunk.data() + b, &stamp, sizeof stamp);
        std::memset(chunk.data() + b + sizeof stamp, static_cast<int>(stamp & 0xff), kBlock - sizeof stamp);
      }
      const std::size_t n = std::min(chunk.size(), cfg.file_bytes - off);
      if (::pwrite(fd, chunk.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
        throw std::system_error(errno, std::generic_category(), "write " + path);
      }
    }
  }
  // Warm: read it all, then count the resident pages.
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<std::byte> chunk(1 << 20);
  for (off_t off = 0; ::pread(fd, chunk.data(), chunk.size(), off) > 0; off += static_cast<off_t>(chunk.size())) {
  }
  void* map = ::mmap(nullptr, cfg.file_bytes, PROT_READ, MAP_SHARED, fd, 0);
  double cached = 0;
  if (map != MAP_FAILED) {
    const std::size_t pages = (cfg.file_bytes + 4095) / 4096;
    std::vector<unsigned char> vec(pages);
    if (::mincore(map, cfg.file_bytes, vec.data()) == 0) {
      cached = static_cast<double>(std::count_if(vec.begin(), vec.end(), [](unsigned char c) { return c & 1; })) /
               static_cast<double>(pages);
    }
    ::munmap(map, cfg.file_bytes);
  }
  ::close(fd);
  return cached;
}

struct RngState {
  std::uint64_t s;
  std::uint64_t next_block(std::uint64_t blocks) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s % blocks;
  }
};

/// One lane: a 4 KiB aligned buffer and the engine variable ordering its reads.
struct Lane {
  std::unique_ptr<std::byte, decltype(&std::free)> buf{static_cast<std::byte*>(std::aligned_alloc(kBlock, kBlock)),
                                                        &std::free};
  ordo::Var var;
  RngState rng{0};
  std::uint64_t done = 0;
  std::uint64_t bad = 0;
};

struct Outcome {
  double iops = 0;
  bool ok = true;
};

int open_file(const Config& cfg, bool direct) {
  const int fd = ::open(file_path(cfg).c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + file_path(cfg));
  return fd;
}

/// IoOptions::from_env() (ORDO_IO_IDLE_WORKERS_REAP=0 measures the reaper
/// alone), with the backend under test.
ordo::io::IoOptions reactor_options(ordo::io::Backend b) {
  ordo::io::IoOptions o = ordo::io::IoOptions::from_env();
  o.backend = b;
  o.log = [](std::string_view) {};
  return o;
}

/// Engine ops: io.push_read on `depth` lanes, round robin, for the run's length.
Outcome ordo_ops(const Config& cfg, ordo::io::Backend backend, unsigned depth, bool direct, unsigned seed) {
  const int fd = open_file(cfg, direct);
  const std::uint64_t blocks = cfg.file_bytes / kBlock;
  std::uint64_t pushed = 0;
  Clock::duration elapsed{};
  {
    ordo::Engine engine;
    ordo::io::Reactor io(engine, reactor_options(backend));
    std::vector<Lane> lanes(depth);
    for (unsigned i = 0; i < depth; ++i) {
      lanes[i].var = engine.new_variable();
      lanes[i].rng.s = 0x9E3779B97F4A7C15ULL * (seed * 1000 + i + 1);
    }
    const auto start = Clock::now();
    const auto stop = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg.seconds));
    // The engine's backpressure lets a pusher go on while every worker is
    // idle (the ops in flight wait on I/O), so at low depths it would run far
    // ahead and the run would last until thousands of slow reads drained:
    // keep it within `window` ops of the reads instead.
    const std::size_t window = std::max<std::size_t>(512, 8 * depth);
    while (Clock::now() < stop) {
      while (engine.in_flight() > window) std::this_thread::sleep_for(std::chrono::microseconds(50));
      for (int k = 0; k < 64; ++k) {
        Lane& l = lanes[pushed % depth];
        io.push_read(l.var, fd, {l.buf.get(), kBlock}, l.rng.next_block(blocks) * kBlock);
        ++pushed;
      }
    }
    engine.wait_for_all();  // throws if a read failed or fell short
    elapsed = Clock::now() - start;
  }
  ::close(fd);
  return {static_cast<double>(pushed) / std::chrono::duration<double>(elapsed).count(), true};
}

ordo::Task<void> read_loop(ordo::io::Reactor& io, int fd, std::uint64_t blocks, Clock::time_point stop, Lane& l) {
  while (Clock::now() < stop) {
    const std::uint64_t off = l.rng.next_block(blocks) * kBlock;
    const std::size_t n = co_await io.read(fd, {l.buf.get(), kBlock}, off);
    l.bad += n != kBlock || !block_ok(l.buf.get(), off);
    ++l.done;
  }
}

/// Coroutines: `depth` of them, each reading and checking one block at a time.
Outcome ordo_coro(const Config& cfg, ordo::io::Backend backend, unsigned depth, bool direct, unsigned seed) {
  const int fd = open_file(cfg, direct);
  const std::uint64_t blocks = cfg.file_bytes / kBlock;
  std::vector<Lane> lanes(depth);
  Clock::duration elapsed{};
  {
    ordo::Engine engine;
    ordo::io::Reactor io(engine, reactor_options(backend));
    for (unsigned i = 0; i < depth; ++i) lanes[i].rng.s = 0x9E3779B97F4A7C15ULL * (seed * 1000 + i + 1);
    const auto start = Clock::now();
    const auto stop = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg.seconds));
    ordo::AsyncScope scope;
    for (Lane& l : lanes) scope.spawn(read_loop(io, fd, blocks, stop, l));
    scope.sync_join();
    elapsed = Clock::now() - start;
  }
  ::close(fd);
  std::uint64_t done = 0, bad = 0;
  for (const Lane& l : lanes) {
    done += l.done;
    bad += l.bad;
  }
  return {static_cast<double>(done) / std::chrono::duration<double>(elapsed).count(), bad == 0};
}

/// fio, same file, block size and depth; IOPS parsed from its JSON report.
Outcome run_fio(const Config& cfg, unsigned depth, bool direct) {
  const long ms = std::max(100L, static_cast<long>(cfg.seconds * 1000));
  const std::string cmd = "fio --name=randread --filename=" + file_path(cfg) +
                          " --rw=randread --bs=4k --ioengine=io_uring --iodepth=" + std::to_string(depth) +
                          " --direct=" + (direct ? "1" : "0") + " --size=" + std::to_string(cfg.file_bytes) +
                          " --runtime=" + std::to_string(ms) + "ms --time_based --norandommap --randrepeat=0" +
                          " --invalidate=0 --output-format=json 2>/dev/null";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {0, false};
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  // "read" : { ... "iops" : 12345.6, ...: the first "iops" after the read section.
  const std::size_t read_at = out.find("\"read\" :");
  const std::size_t iops_at = read_at == std::string::npos ? read_at : out.find("\"iops\" :", read_at);
  if (rc != 0 || iops_at == std::string::npos) return {0, false};
  return {std::strtod(out.c_str() + iops_at + 8, nullptr), true};
}

/// A virtio disk may serve a fraction of its speed after a pause, and only
/// O_DIRECT reads reach it: before the first O_DIRECT cell, read at QD32 in
/// 1 s windows until two in a row agree within 10% (at most `max_windows`;
/// why: docs/io.md, "How bench/io treats the disk"). Returns the seconds
/// spent and the last window's IOPS.
std::pair<unsigned, double> warm_disk(const Config& cfg, ordo::io::Backend backend, unsigned max_windows) {
  Config one = cfg;
  one.seconds = 1.0;
  double last = 0;
  unsigned w = 0;
  while (w < max_windows) {
    progress(cfg, "warming the disk: window " + std::to_string(w + 1));
    const double iops = ordo_coro(one, backend, 32, true, 1000 + w).iops;
    ++w;
    if (last > 0 && std::abs(iops - last) <= 0.1 * std::max(iops, last)) return {w, iops};
    last = iops;
  }
  return {w, last};
}

/// Before every O_DIRECT cell: half a second of QD32 O_DIRECT reads, untimed
/// and the same whatever engine comes next, so that every cell starts from a
/// disk that has just been busy, whichever cell ran before it: a disk
/// rate-limited with a burst allowance would otherwise favour the cell after
/// a light one (docs/io.md, "How bench/io treats the disk").
void settle_disk(const Config& cfg, ordo::io::Backend backend, unsigned seed) {
  Config half = cfg;
  half.seconds = 0.5;
  (void)ordo_coro(half, backend, 32, true, seed);
}

bool have_fio() { return std::system("fio --version >/dev/null 2>&1") == 0; }

}  // namespace

std::vector<Row> run_randread(const Config& cfg, std::string& md) {
  std::vector<Row> rows;
  std::string warm_note;
  progress(cfg, "random reads: preparing " + file_path(cfg));
  const double cached = prepare_file(cfg);
  const bool fio = have_fio();
  if (!fio) std::fprintf(stderr, "ordo_io_bench: fio not found: random reads without the fio baseline\n");

  struct Engine {
    std::string name;
    int kind;  // 0 fio, 1 ops, 2 coro
    ordo::io::Backend backend;
  };
  std::vector<Engine> engines;
  if (fio) engines.push_back({"fio", 0, ordo::io::Backend::automatic});
  for (ordo::io::Backend b : cfg.backends) {
    engines.push_back({std::string("ordo-ops-") + backend_name(b), 1, b});
    engines.push_back({std::string("ordo-coro-") + backend_name(b), 2, b});
  }

  md += "## 4 KiB random reads\n\n";
  md += "File: " + std::to_string(cfg.file_bytes >> 20) + " MiB in `" + cfg.dir + "`, " +
        std::to_string(static_cast<int>(cached * 100 + 0.5)) +
        "% in the page cache after warming. IOPS, median of " + std::to_string(cfg.runs) + " runs (O_DIRECT: " +
        std::to_string(cfg.direct_runs) + ") of " +
        seconds_text(cfg) + " s (min-max). `ordo-ops`: `Reactor::push_read` ops, one buffer variable per "
        "lane; `ordo-coro`: `depth` coroutines each `co_await io.read` in a loop (and checking the block). fio: "
        "`--ioengine=io_uring --rw=randread --bs=4k --invalidate=0`, one job. `vs fio`: the median of the "
        "runs' own ratios (each ordo run against the fio run of the same round, seconds apart), "
        "min-max beside it; the disk's speed drifts more between rounds than within one.\n\n";
  md += "| mode | QD | engine | IOPS median | min-max | vs fio | ratio min-max |\n|---|---:|---|---:|---:|---:|---:|\n";

  bool warmed = false;
  for (const bool direct : cfg.direct) {
    if (direct && !warmed && !cfg.backends.empty()) {
      warmed = true;
      const auto [secs, iops] = warm_disk(cfg, cfg.backends.front(), cfg.quick ? 2 : 30);
      warm_note = "Before the first O_DIRECT cell the disk was warmed with " + std::to_string(secs) +
                  " s of QD32 O_DIRECT reads, until two 1 s windows agreed within 10% (last: " + human(iops) +
                  " IOPS): after a pause this disk serves a fraction of its speed for tens of seconds.\n\n";
    }
    for (const unsigned depth : cfg.depths) {
      const std::string workload = std::string("randread-") + (direct ? "direct" : "buffered") + "-qd" + std::to_string(depth);
      std::vector<Row> these(engines.size());
      const unsigned runs = direct ? cfg.direct_runs : cfg.runs;
      for (unsigned r = 0; r < runs; ++r) {
        for (std::size_t k = 0; k < engines.size(); ++k) {
          const std::size_t e = (k + r) % engines.size();
          progress(cfg, workload + " run " + std::to_string(r + 1) + "/" + std::to_string(runs) + ": " + engines[e].name);
          if (direct && !cfg.backends.empty()) settle_disk(cfg, cfg.backends.front(), 3000 + r * 16 + k);
          Outcome o{};
          try {
            if (engines[e].kind == 0) {
              o = run_fio(cfg, depth, direct);
            } else if (engines[e].kind == 1) {
              o = ordo_ops(cfg, engines[e].backend, depth, direct, r);
            } else {
              o = ordo_coro(cfg, engines[e].backend, depth, direct, r);
            }
          } catch (const std::exception& ex) {
            std::fprintf(stderr, "ordo_io_bench: %s %s: %s\n", workload.c_str(), engines[e].name.c_str(), ex.what());
            o = {0, false};
          }
          these[e].fig.runs.push_back(o.iops);
          these[e].ok = these[e].ok && o.ok;
        }
      }
      const double fio_iops = fio ? these[0].fig.median() : 0;
      for (std::size_t e = 0; e < engines.size(); ++e) {
        Row& row = these[e];
        row.workload = workload;
        row.engine = engines[e].name;
        row.unit = "IOPS";
        char ratio[32] = "-";
        char spread[32] = "-";
        if (fio && e != 0 && fio_iops > 0) {
          const Figure ratios = paired_ratios(row.fig, these[0].fig);
          const double paired = ratios.median();
          std::snprintf(ratio, sizeof ratio, "%.2f", paired);
          std::snprintf(spread, sizeof spread, "%.2f-%.2f", ratios.min(), ratios.max());
          char extra[160];
          std::snprintf(extra, sizeof extra, "vs_fio=%.3f vs_fio_min=%.3f vs_fio_max=%.3f medians_ratio=%.3f", paired,
                        ratios.min(), ratios.max(), row.fig.median() / fio_iops);
          row.extra = extra;
          if (engines[e].backend == ordo::io::Backend::uring) {
            row.extra += std::string(" target_90pct=") + (paired >= 0.9 ? "met" : "missed");
          }
        }
        print_result(row);
        md += std::string("| ") + (direct ? "O_DIRECT" : "buffered") + " | " + std::to_string(depth) + " | " + row.engine +
              " | " + human(row.fig.median()) + " | " + human(row.fig.min()) + "-" + human(row.fig.max()) + " | " +
              ratio + (row.ok ? "" : " (FAILED)") + " | " + spread + " |\n";
        rows.push_back(row);
      }
    }
  }
  md += "\n" + warm_note;
  if (!warm_note.empty()) {
    md += "Every O_DIRECT cell, fio's included, came right after 0.5 s of untimed QD32 O_DIRECT reads, so that each "
          "starts from a disk that has just been busy (the rotation otherwise put fio after a threads-backend cell, "
          "a third of the load, in almost every round; this disk may be rate-limited with a burst allowance).\n\n";
  }
  return rows;
}

}  // namespace iobench
