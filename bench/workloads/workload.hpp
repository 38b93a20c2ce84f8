// bench/workloads/workload.hpp - the traces the benchmark replays, and the
// tiny deterministic op body that makes any ordering error visible.
//
// A trace is a list of ops, each naming the variables (by index) it reads and
// the ones it writes. Every engine replays the same trace; the serial engine
// replays it in a plain loop. Each variable owns one uint64_t slot; op i
// computes h = mix(i, slots of its reads) and then, for every variable it
// writes, slot = mix(slot, h). `mix` is not commutative, so running two
// conflicting ops in the wrong order (or running an op twice, or not at all)
// changes the final slots, which are compared with the serial run's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ordo_bench {

// ---------------------------------------------------------------- hashing

/// The splitmix64 finaliser: a cheap, well-mixing bijection on 64 bits.
constexpr std::uint64_t fmix(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// One non-commutative hash step: mix(a, b) != mix(b, a) in general.
constexpr std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept {
  return fmix(a * 0x9e3779b97f4a7c15ULL + b);
}

/// splitmix64: the fixed-seed generator behind the random traces.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}
  constexpr std::uint64_t next() noexcept {
    state_ += 0x9e3779b97f4a7c15ULL;
    return fmix(state_);
  }
  /// Uniform in [0, n) (Lemire's multiply-shift; the bias is immaterial here).
  constexpr std::uint32_t below(std::uint32_t n) noexcept {
    return static_cast<std::uint32_t>((next() >> 32) * n >> 32);
  }

 private:
  std::uint64_t state_;
};

// ---------------------------------------------------------------- traces

/// The most variables one op of any workload touches.
inline constexpr std::size_t kMaxAccess = 8;

/// A replayable list of ops.
struct Trace {
  std::string id;                      ///< workload id: W1, W2, W2op, ...
  std::uint32_t num_vars = 0;
  std::vector<std::uint32_t> begin;    ///< op i's accesses are acc[begin[i], begin[i+1])
  std::vector<std::uint8_t> n_reads;   ///< the first n_reads[i] of them are reads, the rest writes
  std::vector<std::uint32_t> acc;      ///< variable indices
  std::uint32_t spin_iters = 0;        ///< busy work per op (W6, METG sweeps), else 0
  bool prebuilt_operator = false;      ///< replay as one pre-built Operator pushed ops() times (W2op)
  bool coroutine = false;              ///< every op is a coroutine awaiting its push (W2co, W4co)

  [[nodiscard]] std::size_t ops() const noexcept { return n_reads.size(); }
  [[nodiscard]] std::span<const std::uint32_t> reads(std::size_t i) const noexcept {
    return {acc.data() + begin[i], n_reads[i]};
  }
  [[nodiscard]] std::span<const std::uint32_t> writes(std::size_t i) const noexcept {
    return {acc.data() + begin[i] + n_reads[i], acc.data() + begin[i + 1]};
  }
};

/// Workload ids in their canonical order.
inline constexpr std::string_view kWorkloadIds[] = {"W1", "W2", "W2op", "W2co", "W3", "W4", "W4co", "W5", "W6"};
[[nodiscard]] bool is_workload_id(std::string_view id) noexcept;
/// The workload whose trace `id` replays: W2 for W2op and W2co, W4 for W4co,
/// `id` itself otherwise. The variants differ only in how ordo is driven
/// (a pre-built Operator, coroutines); peers run the base workloads only.
[[nodiscard]] std::string_view base_workload(std::string_view id) noexcept;
/// One-line description of a workload, for the report.
[[nodiscard]] std::string_view describe_workload(std::string_view id) noexcept;

/// Builds the trace of workload `id` with about `ops` ops (W3 and W5 round to
/// whole rounds / a square grid). `spin_iters` is the busy work in every op
/// body: W6's ~10 us, or the grain of a METG sweep point (0: none).
[[nodiscard]] Trace make_trace(std::string_view id, std::size_t ops, std::uint32_t spin_iters);

// ---------------------------------------------------------------- op body

inline constexpr std::uint64_t kOpSeed = 0x6f72646f2d6f7073ULL;   // "ordo-ops"
inline constexpr std::uint64_t kVarSeed = 0x6f72646f2d766172ULL;  // "ordo-var"

/// `iters` dependent hash steps: the W6 busy work (its result feeds the op's
/// hash, so the compiler cannot drop it).
[[nodiscard]] std::uint64_t busy_work(std::uint64_t h, std::uint32_t iters) noexcept;

/// Op i of trace t, applied to `slots` (one per variable). The same code runs
/// in the serial loop and inside every engine's op body.
inline void run_op(const Trace& t, std::uint64_t* slots, std::uint32_t i) noexcept {
  const std::uint32_t* a = t.acc.data() + t.begin[i];
  const std::uint32_t n = t.begin[i + 1] - t.begin[i];
  const std::uint32_t nr = t.n_reads[i];
  std::uint64_t h = mix(kOpSeed, i);
  for (std::uint32_t k = 0; k < nr; ++k) h = mix(h, slots[a[k]]);
  if (t.spin_iters != 0) h = busy_work(h, t.spin_iters);
  for (std::uint32_t k = nr; k < n; ++k) slots[a[k]] = mix(slots[a[k]], h);
}

/// The slots every run starts from.
[[nodiscard]] std::vector<std::uint64_t> initial_slots(std::uint32_t num_vars);
/// An order-sensitive 64-bit digest of the final slots (compared across engines).
[[nodiscard]] std::uint64_t digest(std::span<const std::uint64_t> slots) noexcept;

/// busy_work iterations that take about `us` microseconds on this machine
/// (best of several timings, so a busy neighbour inflates it as little as possible).
[[nodiscard]] std::uint32_t calibrate_spin(double us);

}  // namespace ordo_bench
