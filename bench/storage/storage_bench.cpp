// bench/storage/storage_bench.cpp - ordo::BufferPool's cost beside its peers.
//
//  1. Round trip (acquire, touch one byte, release) for 4 KiB - 4 MiB:
//     malloc/free (std::aligned_alloc), a plain lock-free free list (a
//     Treiber stack of cached blocks), and the pool: "pool" with no limit
//     (releases are engine ops that finish behind the loop) and "pool, 1
//     block" with a limit of one block (each acquire waits for the previous
//     release op to run: the engine's hand-off latency).
//  2. A loader loop: `batches` batches of 1 MiB read (pread) from a file,
//     processed (a checksum) and released, one op per batch, with buffers
//     from a pool of 8 against one allocation per batch (freed in the op).
//     Each variant runs in a child process, so its peak RSS is its own.
//
//   ordo_storage_bench [--reps R] [--iters N] [--batches B] [--dir D]
// Prints the median and the spread (min-max) over R repetitions.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ordo/ordo.hpp>
#include <ordo/storage.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  int reps = 5;
  int iters = 20000;
  int batches = 256;
  std::string dir = "/var/tmp";
};

struct Spread {
  double median, lo, hi;
};

Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

volatile std::uint8_t g_sink = 0;

/// ns per round trip of `one` (called iters times), over reps repetitions.
Spread time_ns(const Config& cfg, const std::function<void()>& one) {
  std::vector<double> out;
  for (int r = 0; r < cfg.reps; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < cfg.iters; ++i) one();
    out.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / cfg.iters);
  }
  return spread(out);
}

/// A plain lock-free free list of equal blocks (Treiber stack; the ABA
/// problem does not arise with one thread, as here).
class FreeList {
 public:
  explicit FreeList(std::size_t bytes) : bytes_(bytes) {}
  ~FreeList() {
    for (Node* n = head_.load(); n != nullptr;) {
      Node* next = n->next;
      std::free(n);
      n = next;
    }
  }
  void* pop() {
    Node* n = head_.load(std::memory_order_acquire);
    while (n != nullptr && !head_.compare_exchange_weak(n, n->next, std::memory_order_acq_rel)) {
    }
    if (n != nullptr) return n;
    void* p = std::aligned_alloc(4096, bytes_);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void push(void* p) {
    Node* n = static_cast<Node*>(p);
    n->next = head_.load(std::memory_order_relaxed);
    while (!head_.compare_exchange_weak(n->next, n, std::memory_order_acq_rel)) {
    }
  }

 private:
  struct Node {
    Node* next;
  };
  std::size_t bytes_;
  std::atomic<Node*> head_{nullptr};
};

void round_trips(const Config& cfg) {
  std::printf("round trip: acquire, touch a byte, release (ns per round trip, median [min-max] of %d x %d)\n",
              cfg.reps, cfg.iters);
  std::printf("  %8s  %26s  %26s  %26s  %26s\n", "size", "malloc/free", "lock-free list", "pool", "pool, 1 block");
  ordo::Engine engine(ordo::Options{.cpu_workers = 1});
  for (std::size_t size : {std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{4} << 20}) {
    const Spread m = time_ns(cfg, [&] {
      auto* p = static_cast<std::uint8_t*>(std::aligned_alloc(4096, size));
      p[0] = 1;
      g_sink = g_sink + p[0];
      std::free(p);
    });
    FreeList list(size);
    const Spread f = time_ns(cfg, [&] {
      auto* p = static_cast<std::uint8_t*>(list.pop());
      p[8] = 1;
      g_sink = g_sink + p[8];
      list.push(p);
    });
    ordo::BufferPool pool(engine);
    const Spread p = time_ns(cfg, [&] {
      ordo::Buffer b = pool.acquire(size).wait();
      b.data()[0] = std::byte{1};
      g_sink = g_sink + static_cast<std::uint8_t>(b.data()[0]);
    });
    engine.wait_for_all();
    ordo::BufferPool one(engine, {.limit_bytes = size});
    const Spread o = time_ns(cfg, [&] {
      ordo::Buffer b = one.acquire(size).wait();
      b.data()[0] = std::byte{1};
      g_sink = g_sink + static_cast<std::uint8_t>(b.data()[0]);
    });
    engine.wait_for_all();
    auto cell = [](const Spread& s) {
      static char buf[4][64];
      static int k = 0;
      char* out = buf[k++ % 4];
      std::snprintf(out, 64, "%8.0f [%6.0f-%8.0f]", s.median, s.lo, s.hi);
      return out;
    };
    std::printf("  %6zu K  %26s  %26s  %26s  %26s\n", size >> 10, cell(m), cell(f), cell(p), cell(o));
  }
}

// ---------------------------------------------------------------- loader loop

constexpr std::size_t kBatch = std::size_t{1} << 20;
constexpr std::size_t kFileBatches = 64;  // a 64 MiB file, read round and round

std::uint64_t checksum(const std::byte* p, std::size_t n) {
  std::uint64_t h = 0;
  for (std::size_t i = 0; i < n; i += 64) h = h * 31 + static_cast<std::uint64_t>(p[i]);
  return h;
}

/// One variant's loop; returns its seconds.
double loader_loop(int fd, int batches, bool pooled) {
  ordo::Engine engine;
  ordo::Var sum = engine.new_variable();
  std::uint64_t total = 0;
  const auto t0 = Clock::now();
  if (pooled) {
    ordo::BufferPool pool(engine, {.limit_bytes = 8 * kBatch});
    for (int b = 0; b < batches; ++b) {
      ordo::Buffer buf = pool.acquire(kBatch).wait();  // waits while 8 are out
      const off_t off = static_cast<off_t>((static_cast<std::size_t>(b) % kFileBatches) * kBatch);
      engine.push_sync(
          [fd, off, p = buf.data(), &total] {
            if (::pread(fd, p, kBatch, off) != static_cast<ssize_t>(kBatch)) throw std::runtime_error("short read");
            total += checksum(p, kBatch);
          },
          ordo::Context::cpu(), {}, {buf.var(), sum});
    }  // each buffer released behind its op
    engine.wait_for_all();
  } else {
    for (int b = 0; b < batches; ++b) {
      auto* p = static_cast<std::byte*>(std::aligned_alloc(4096, kBatch));
      if (p == nullptr) throw std::bad_alloc();
      const off_t off = static_cast<off_t>((static_cast<std::size_t>(b) % kFileBatches) * kBatch);
      engine.push_sync(
          [fd, off, p, &total] {
            const bool ok = ::pread(fd, p, kBatch, off) == static_cast<ssize_t>(kBatch);
            if (ok) total += checksum(p, kBatch);
            std::free(p);
            if (!ok) throw std::runtime_error("short read");
          },
          ordo::Context::cpu(), {}, {sum});
    }
    engine.wait_for_all();
  }
  g_sink = g_sink + static_cast<std::uint8_t>(total);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Runs a variant in a child: its seconds and its peak RSS (KiB).
std::pair<double, long> in_child(int fd, int batches, bool pooled) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) throw std::runtime_error("pipe");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    double s = -1;
    try {
      s = loader_loop(fd, batches, pooled);
    } catch (...) {
    }
    (void)!::write(pipefd[1], &s, sizeof s);
    ::_exit(0);
  }
  ::close(pipefd[1]);
  double s = -1;
  (void)!::read(pipefd[0], &s, sizeof s);
  ::close(pipefd[0]);
  int status = 0;
  rusage ru{};
  ::wait4(pid, &status, 0, &ru);
  if (s < 0) throw std::runtime_error("the loader loop failed");
  return {s, ru.ru_maxrss};
}

void loader(const Config& cfg) {
  const std::string path = cfg.dir + "/ordo_storage_bench_" + std::to_string(::getpid()) + ".bin";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create " + path);
  std::vector<std::byte> block(kBatch, std::byte{7});
  for (std::size_t b = 0; b < kFileBatches; ++b) {
    if (::pwrite(fd, block.data(), kBatch, static_cast<off_t>(b * kBatch)) != static_cast<ssize_t>(kBatch)) {
      ::close(fd);
      ::unlink(path.c_str());
      throw std::runtime_error("cannot write " + path);
    }
  }
  std::printf("loader loop: %d batches of 1 MiB read (pread, page cache), checksummed, released; one op per batch\n",
              cfg.batches);
  std::printf("  %-28s  %30s  %14s\n", "variant", "MiB/s, median [min-max]", "peak RSS (MiB)");
  for (bool pooled : {false, true}) {
    std::vector<double> rates;
    long rss = 0;
    for (int r = 0; r < cfg.reps; ++r) {
      const auto [s, kib] = in_child(fd, cfg.batches, pooled);
      rates.push_back(cfg.batches / s);
      rss = std::max(rss, kib);
    }
    const Spread sp = spread(rates);
    std::printf("  %-28s  %10.0f [%6.0f-%6.0f]        %14.1f\n",
                pooled ? "pool of 8 buffers" : "one allocation per batch", sp.median, sp.lo, sp.hi, rss / 1024.0);
  }
  ::close(fd);
  ::unlink(path.c_str());
}

}  // namespace

int main(int argc, char** argv) try {
  Config cfg;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--reps") cfg.reps = std::stoi(v);
    else if (a == "--iters") cfg.iters = std::stoi(v);
    else if (a == "--batches") cfg.batches = std::stoi(v);
    else if (a == "--dir") cfg.dir = v;
    else throw std::invalid_argument("unknown option " + a);
  }
  if (cfg.reps < 1 || cfg.iters < 1 || cfg.batches < 1) throw std::invalid_argument("counts must be positive");
  round_trips(cfg);
  loader(cfg);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ordo_storage_bench: %s\n", e.what());
  return 1;
}
