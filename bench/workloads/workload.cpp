// bench/workloads/workload.cpp - trace generators, slots, digest, calibration.
#include "workload.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <stdexcept>

namespace ordo_bench {

namespace {

constexpr std::uint64_t kRandomSeed = 0x5eed0004ULL;  // W4 and W6 share it
constexpr std::uint32_t kRandomVars = 1000;
constexpr std::uint32_t kFanReaders = 64;

/// Appends ops to a trace; capacity is reserved up front so that the vectors
/// never reallocate (reallocation would inflate the measured peak RSS).
class TraceBuilder {
 public:
  TraceBuilder(std::string_view id, std::uint32_t num_vars, std::size_t ops, std::size_t max_access_per_op) {
    t_.id = std::string(id);
    t_.num_vars = num_vars;
    t_.begin.reserve(ops + 1);
    t_.n_reads.reserve(ops);
    t_.acc.reserve(ops * max_access_per_op);
    t_.begin.push_back(0);
  }

  void add(std::span<const std::uint32_t> reads, std::span<const std::uint32_t> writes) {
    if (reads.size() + writes.size() > kMaxAccess || writes.empty()) {
      throw std::logic_error("trace generator: bad op shape");
    }
    t_.acc.insert(t_.acc.end(), reads.begin(), reads.end());
    t_.acc.insert(t_.acc.end(), writes.begin(), writes.end());
    t_.n_reads.push_back(static_cast<std::uint8_t>(reads.size()));
    t_.begin.push_back(static_cast<std::uint32_t>(t_.acc.size()));
  }
  void add(std::initializer_list<std::uint32_t> reads, std::initializer_list<std::uint32_t> writes) {
    add(std::span(reads.begin(), reads.size()), std::span(writes.begin(), writes.size()));
  }

  Trace take() { return std::move(t_); }

 private:
  Trace t_;
};

Trace independent(std::size_t ops) {  // W1
  const auto n = static_cast<std::uint32_t>(ops);
  TraceBuilder b("W1", n, ops, 1);
  for (std::uint32_t i = 0; i < n; ++i) b.add({}, {i});
  return b.take();
}

Trace chain(std::string_view id, std::size_t ops) {  // W2, W2op
  TraceBuilder b(id, 1, ops, 1);
  for (std::size_t i = 0; i < ops; ++i) b.add({}, {0});
  return b.take();
}

Trace fan(std::size_t ops) {  // W3: var 0 is shared, vars 1..64 are the readers' own
  const std::size_t rounds = std::max<std::size_t>(1, ops / (1 + kFanReaders));
  TraceBuilder b("W3", 1 + kFanReaders, rounds * (1 + kFanReaders), 2);
  for (std::size_t r = 0; r < rounds; ++r) {
    b.add({}, {0});
    for (std::uint32_t k = 1; k <= kFanReaders; ++k) b.add({0}, {k});
  }
  return b.take();
}

Trace random_ops(std::string_view id, std::size_t ops) {  // W4, W6
  TraceBuilder b(id, kRandomVars, ops, 5);
  SplitMix64 rng(kRandomSeed);
  std::uint32_t picked[kMaxAccess];
  for (std::size_t i = 0; i < ops; ++i) {
    const std::uint32_t n_reads = rng.below(4);       // 0..3
    const std::uint32_t n_writes = 1 + rng.below(2);  // 1..2
    const std::uint32_t n = n_reads + n_writes;
    for (std::uint32_t k = 0; k < n; ++k) {
      std::uint32_t v = 0;
      do {
        v = rng.below(kRandomVars);
      } while (std::find(picked, picked + k, v) != picked + k);  // distinct within one op
      picked[k] = v;
    }
    b.add(std::span(picked, n_reads), std::span(picked + n_reads, n_writes));
  }
  return b.take();
}

Trace wavefront(std::size_t ops) {  // W5: op (i,j) reads (i-1,j), (i,j-1), writes (i,j)
  const auto side = std::max<std::uint32_t>(1, static_cast<std::uint32_t>(std::lround(std::sqrt(double(ops)))));
  TraceBuilder b("W5", side * side, std::size_t{side} * side, 3);
  std::uint32_t reads[2];
  for (std::uint32_t i = 0; i < side; ++i) {
    for (std::uint32_t j = 0; j < side; ++j) {
      std::size_t nr = 0;
      if (i > 0) reads[nr++] = (i - 1) * side + j;
      if (j > 0) reads[nr++] = i * side + (j - 1);
      const std::uint32_t w = i * side + j;
      b.add(std::span(reads, nr), std::span(&w, 1));
    }
  }
  return b.take();
}

/// True if every op has the same reads and writes (so one Operator can replay them all).
bool same_access_lists(const Trace& t) {
  const auto first = std::span(t.acc).subspan(0, t.begin[1]);
  for (std::size_t i = 1; i < t.ops(); ++i) {
    const auto op = std::span(t.acc).subspan(t.begin[i], t.begin[i + 1] - t.begin[i]);
    if (t.n_reads[i] != t.n_reads[0] || !std::ranges::equal(op, first)) return false;
  }
  return true;
}

}  // namespace

bool is_workload_id(std::string_view id) noexcept {
  return std::find(std::begin(kWorkloadIds), std::end(kWorkloadIds), id) != std::end(kWorkloadIds);
}

std::string_view base_workload(std::string_view id) noexcept {
  if (id == "W2op" || id == "W2co") return "W2";
  if (id == "W4co") return "W4";
  return id;
}

std::string_view describe_workload(std::string_view id) noexcept {
  if (id == "W1") return "independent: every op mutates its own variable";
  if (id == "W2") return "chain: every op mutates the same variable (ad-hoc push_sync)";
  if (id == "W2op") return "chain, one pre-built Operator pushed for every op";
  if (id == "W2co") return "chain, every op a coroutine: co_await push(reads, writes) -> Lease, body, release";
  if (id == "W3") return "fan: rounds of 1 writer + 64 readers of one shared variable (each reader writes its own)";
  if (id == "W4") return "random: 1000 variables, 0-3 reads and 1-2 writes per op (splitmix64, fixed seed)";
  if (id == "W4co") return "random (the W4 trace), every op a coroutine: co_await push(reads, writes) -> Lease, body, release";
  if (id == "W5") return "wavefront: square grid, op (i,j) reads (i-1,j), (i,j-1), writes (i,j); pushed row by row";
  if (id == "W6") return "work: the W4 trace with ~10 us of busy work in every op body";
  return "?";
}

Trace make_trace(std::string_view id, std::size_t ops, std::uint32_t spin_iters) {
  if (ops == 0 || ops > 0xFFFF'FFF0) throw std::invalid_argument("op count out of range");
  Trace t;
  if (id == "W1") {
    t = independent(ops);
  } else if (id == "W2") {
    t = chain(id, ops);
  } else if (id == "W2op") {
    t = chain(id, ops);
    t.prebuilt_operator = true;
    if (!same_access_lists(t)) throw std::logic_error("W2op: a pre-built operator needs identical ops");
  } else if (id == "W2co") {
    t = chain(id, ops);
    t.coroutine = true;
  } else if (id == "W3") {
    t = fan(ops);
  } else if (id == "W4") {
    t = random_ops(id, ops);
  } else if (id == "W4co") {
    t = random_ops(id, ops);
    t.coroutine = true;
  } else if (id == "W5") {
    t = wavefront(ops);
  } else if (id == "W6") {
    t = random_ops(id, ops);
  } else {
    throw std::invalid_argument("unknown workload " + std::string(id));
  }
  t.spin_iters = spin_iters;
  return t;
}

std::uint64_t busy_work(std::uint64_t h, std::uint32_t iters) noexcept {
  for (std::uint32_t k = 0; k < iters; ++k) h = mix(h, k);
  return h;
}

std::vector<std::uint64_t> initial_slots(std::uint32_t num_vars) {
  std::vector<std::uint64_t> slots(num_vars);
  for (std::uint32_t v = 0; v < num_vars; ++v) slots[v] = mix(kVarSeed, v);
  return slots;
}

std::uint64_t digest(std::span<const std::uint64_t> slots) noexcept {
  std::uint64_t d = mix(kVarSeed, slots.size());
  for (const std::uint64_t s : slots) d = mix(d, s);
  return d;
}

std::uint32_t calibrate_spin(double us) {
  using Clock = std::chrono::steady_clock;
  constexpr std::uint32_t kProbe = 1U << 16;
  double best_ns_per_iter = 1e9;
  volatile std::uint64_t sink = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const auto t0 = Clock::now();
    sink = busy_work(sink + static_cast<std::uint64_t>(trial), kProbe);
    const auto t1 = Clock::now();
    const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
    best_ns_per_iter = std::min(best_ns_per_iter, ns / kProbe);
  }
  return std::max<std::uint32_t>(1, static_cast<std::uint32_t>(us * 1000.0 / best_ns_per_iter));
}

}  // namespace ordo_bench
