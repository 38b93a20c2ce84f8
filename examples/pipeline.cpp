// pipeline: a coroutine data pipeline on the engine.
//
// Each batch goes through four stages, read -> decode -> transform ->
// aggregate, written as one coroutine. The batches share a ring of buffer
// slots (batch b uses slot b % kSlots) and one aggregate; every buffer is one
// engine variable. Each batch coroutine pushes its four ops up front (ordo's
// eager registration: the dependencies are fixed by push order, not by when
// the coroutine gets to co_await them), then awaits them one by one. So:
//  - batches on different slots overlap on different workers;
//  - a batch reusing a slot waits until the previous user of the slot is done
//    with it (the engine serializes the conflicting accesses);
//  - the aggregate, an order-sensitive hash, is folded in batch order.
// Prints a per-stage timeline and checks the result against a serial run;
// exits non-zero on a mismatch.
#include <ordo/coro.hpp>
#include <ordo/ordo.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace {

constexpr int kBatches = 9;
constexpr int kSlots = 3;
constexpr std::size_t kBytes = std::size_t{1} << 17;

using Clock = std::chrono::steady_clock;

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ULL + b + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The stages, shared by the pipeline and the serial check.
void read_batch(int batch, std::vector<std::uint8_t>& raw) {
  raw.resize(kBytes);
  std::uint64_t s = mix(42, static_cast<std::uint64_t>(batch));
  for (auto& byte : raw) {
    s = mix(s, 1);
    byte = static_cast<std::uint8_t>(s);
  }
}
std::size_t decode(const std::vector<std::uint8_t>& raw, std::vector<std::int32_t>& out) {
  out.resize(raw.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::int16_t>(static_cast<std::uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8)));
  }
  return out.size();
}
void transform(const std::vector<std::int32_t>& in, std::vector<std::int64_t>& out) {
  out.resize(in.size());
  std::int64_t acc = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    acc = (acc * 31 + in[i] * in[i]) % 1'000'000'007;
    out[i] = acc;
  }
}
void aggregate(const std::vector<std::int64_t>& in, std::uint64_t& total) {
  const std::int64_t sum = std::accumulate(in.begin(), in.end(), std::int64_t{0});
  total = mix(total, static_cast<std::uint64_t>(sum));  // order-sensitive on purpose
}

struct Span {
  int batch;
  const char* stage;
  int worker;
  double start_ms;
  double end_ms;
};

class Pipeline {
 public:
  explicit Pipeline(ordo::Engine& engine) : engine_(engine), t0_(Clock::now()) {
    for (int s = 0; s < kSlots; ++s) {
      raw_var_[s] = engine.new_variable();
      dec_var_[s] = engine.new_variable();
      tr_var_[s] = engine.new_variable();
    }
    total_var_ = engine.new_variable();
  }

  /// One batch. All four ops are pushed before the first co_await.
  ordo::Task<void> batch(int b) {
    const int s = b % kSlots;
    auto read_op = ordo::push(engine_, ordo::reads(), ordo::writes(raw_var_[s]));
    auto decode_op = ordo::push(engine_, ordo::reads(raw_var_[s]), ordo::writes(dec_var_[s]),
                                [this, b, s](const ordo::RunContext& rc) {
                                  const double t = now();
                                  const std::size_t n = decode(raw_[s], dec_[s]);
                                  record({b, "decode", rc.worker, t, now()});
                                  return n;
                                });
    auto transform_op = ordo::push(engine_, ordo::reads(dec_var_[s]), ordo::writes(tr_var_[s]));
    auto aggregate_op = ordo::push(engine_, ordo::reads(tr_var_[s]), ordo::writes(total_var_));

    {
      ordo::Lease lease = co_await read_op;  // resumes on the worker that granted it
      const double t = now();
      read_batch(b, raw_[s]);
      record({b, "read", lease.run_context().worker, t, now()});
    }  // released: decode (already pushed) may start
    const std::size_t values = co_await decode_op;
    if (values != kBytes / 2) throw std::runtime_error("decode lost values");
    {
      ordo::Lease lease = co_await transform_op;
      const double t = now();
      transform(dec_[s], tr_[s]);
      record({b, "transform", lease.run_context().worker, t, now()});
    }
    ordo::Lease lease = co_await aggregate_op;
    const double t = now();
    aggregate(tr_[s], total_);
    record({b, "aggregate", lease.run_context().worker, t, now()});
  }

  [[nodiscard]] std::uint64_t total() const { return total_; }
  [[nodiscard]] std::vector<Span> timeline() {
    std::lock_guard lock(m_);
    auto out = spans_;
    std::sort(out.begin(), out.end(), [](const Span& a, const Span& b) { return a.start_ms < b.start_ms; });
    return out;
  }

 private:
  double now() const { return std::chrono::duration<double, std::milli>(Clock::now() - t0_).count(); }
  void record(const Span& s) {
    std::lock_guard lock(m_);
    spans_.push_back(s);
  }

  ordo::Engine& engine_;
  Clock::time_point t0_;
  std::array<ordo::Var, kSlots> raw_var_, dec_var_, tr_var_;
  ordo::Var total_var_;
  std::array<std::vector<std::uint8_t>, kSlots> raw_;
  std::array<std::vector<std::int32_t>, kSlots> dec_;
  std::array<std::vector<std::int64_t>, kSlots> tr_;
  std::uint64_t total_ = 0;
  std::mutex m_;
  std::vector<Span> spans_;
};

std::uint64_t serial() {
  std::vector<std::uint8_t> raw;
  std::vector<std::int32_t> dec;
  std::vector<std::int64_t> tr;
  std::uint64_t total = 0;
  for (int b = 0; b < kBatches; ++b) {
    read_batch(b, raw);
    decode(raw, dec);
    transform(dec, tr);
    aggregate(tr, total);
  }
  return total;
}

}  // namespace

int main() {
  ordo::Engine engine(ordo::Options{.cpu_workers = 4});
  Pipeline pipeline(engine);
  {
    ordo::AsyncScope scope;  // joined before the engine goes
    for (int b = 0; b < kBatches; ++b) scope.spawn(pipeline.batch(b));
    scope.sync_join();
  }
  engine.wait_for_all();

  std::printf("%d batches over %d buffer slots, 4 workers (batch b uses slot b %% %d)\n", kBatches, kSlots, kSlots);
  std::printf("  batch  stage       worker   start ms    end ms\n");
  for (const Span& s : pipeline.timeline()) {
    std::printf("  %5d  %-10s  %6d  %9.2f  %8.2f\n", s.batch, s.stage, s.worker, s.start_ms, s.end_ms);
  }
  const std::uint64_t expected = serial();
  std::printf("aggregate %016llx, serial %016llx: %s\n", static_cast<unsigned long long>(pipeline.total()),
              static_cast<unsigned long long>(expected), pipeline.total() == expected ? "match" : "MISMATCH");
  return pipeline.total() == expected ? 0 : 1;
}
