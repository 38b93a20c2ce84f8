// bench/pipeline/pipeline_bench.hpp - what the pipeline benchmark's variants
// share: the files, the work (count words into a histogram), how a variant
// reads a file, and the stopwatch that times the part of a run it measures.
#pragma once

#include <sys/resource.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pipebench {

using Clock = std::chrono::steady_clock;

/// Words are counted by a hash of their letters into this many bins: the
/// merge of one file's histogram is a short loop, the count the real work.
inline constexpr std::size_t kBins = 1024;
using Hist = std::array<std::uint64_t, kBins>;

/// How a variant reads: through the page cache (warm: every file was read
/// just before), or with O_DIRECT into 4 KiB-aligned buffers (the device,
/// never the cache).
enum class Mode { warm, direct };

/// One run's job: the files, how to read them, and whether to count words
/// (`work`) or only add up the bytes (the per-file overhead figures).
struct Job {
  std::vector<std::string> paths;
  std::uint64_t bytes = 0;
  Mode mode = Mode::warm;
  bool work = true;
};

/// FNV-1a over each run of letters; a word's hash picks its bin.
inline void count_words(std::span<const char> text, Hist& h) noexcept {
  constexpr std::uint32_t kSeed = 2166136261u;
  std::uint32_t hash = kSeed;
  bool in_word = false;
  for (const char c : text) {
    const unsigned u = static_cast<unsigned char>(c);
    if (u - 'a' < 26u) {
      hash = (hash ^ u) * 16777619u;
      in_word = true;
    } else if (in_word) {
      ++h[hash % kBins];
      hash = kSeed;
      in_word = false;
    }
  }
  if (in_word) ++h[hash % kBins];
}

/// The work of one file: its words counted into `h`, or (no work) its size
/// added to bin 0.
inline void process(const Job& job, std::span<const char> text, Hist& h) noexcept {
  if (job.work) {
    count_words(text, h);
  } else {
    h[0] += text.size();
  }
}

inline void merge(Hist& into, const Hist& from) noexcept {
  for (std::size_t i = 0; i < kBins; ++i) into[i] += from[i];
}

/// The merge of one file's histogram: all bins, or (no work) bin 0 alone,
/// so that the per-file overhead figures time the op, not 1024 additions.
inline void merge(const Job& job, Hist& into, const Hist& from) noexcept {
  if (job.work) {
    merge(into, from);
  } else {
    into[0] += from[0];
  }
}

/// A 4 KiB-aligned buffer for O_DIRECT reads.
struct Aligned {
  std::unique_ptr<char, decltype(&std::free)> mem{nullptr, &std::free};
  std::size_t size = 0;  ///< bytes of file content in it
  [[nodiscard]] std::span<const char> text() const noexcept { return {mem.get(), size}; }
};
inline constexpr std::size_t kAlign = 4096;
[[nodiscard]] inline std::size_t round_up(std::size_t n) noexcept { return (n + kAlign - 1) / kAlign * kAlign; }
/// A buffer of at least `n` bytes (a whole number of 4 KiB blocks).
Aligned aligned_buffer(std::size_t n);

/// Plain blocking reads (the serial loop and the thread pool): open, fstat,
/// read until a short read, close. Throws std::system_error.
std::string read_plain(const std::string& path);
Aligned read_plain_direct(const std::string& path);

/// Wall time and process CPU time (getrusage: every thread, kernel included)
/// of the measured part of a run. A variant calls start() after its set-up
/// (an engine, a reactor, a pool's threads are not timed: a program makes
/// them once) and stop() when the result is complete.
class Stopwatch {
 public:
  void start() noexcept;
  void stop() noexcept;
  [[nodiscard]] double wall_ms() const noexcept { return wall_ms_; }
  [[nodiscard]] double cpu_ms() const noexcept { return cpu_ms_; }
  /// Minor page faults meanwhile (memory the run touched for the first time).
  [[nodiscard]] double faults() const noexcept { return faults_; }

 private:
  Clock::time_point t0_{};
  double cpu0_ = 0;
  double faults0_ = 0;
  double wall_ms_ = 0;
  double cpu_ms_ = 0;
  double faults_ = 0;
};

/// A variant: runs the job, times it with `sw`, returns the merged histogram.
struct Variant {
  std::string name;
  std::string what;  ///< one line for the table's legend
  Hist (*run)(const Job& job, Stopwatch& sw, const void* arg);
  const void* arg = nullptr;
  bool in_work = true;     ///< measured in the counting tables
  bool in_nowork = true;   ///< measured in the per-file overhead table
};

// The variants, one file each.
Hist run_serial(const Job& job, Stopwatch& sw, const void* arg);
Hist run_threads(const Job& job, Stopwatch& sw, const void* arg);  ///< arg: const unsigned* threads
/// ordo's variants (ordo.cpp). arg: const OrdoArgs*.
struct OrdoArgs {
  enum class Shape { unbounded, bounded, channels, read_only } shape = Shape::bounded;
  std::size_t limit = 4;  ///< bounded: lanes; channels: readers and parsers each
};
Hist run_ordo(const Job& job, Stopwatch& sw, const void* arg);

}  // namespace pipebench
