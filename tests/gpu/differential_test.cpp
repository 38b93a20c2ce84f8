// tests/gpu/differential_test.cpp - random traces of GPU ops (compute and copy
// streams of two devices), CPU ops, waits and coroutine leases over shared
// buffers, on the simulated backend with random per-item delays, compared
// bit for bit with a serial run on the host. Prints its seed
// (ORDO_TEST_SEED=<n> replays one). A negative control proves the trace
// catches a missing cross-stream wait.
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <vector>

#include "gpu/gpu_test_util.hpp"

namespace ordo::test {
namespace {

constexpr int kVars = 8;
constexpr int kLen = 4;
using Row = std::array<std::uint64_t, kLen>;

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  a ^= b + 0x9E3779B97F4A7C15ULL + (a << 6) + (a >> 2);
  return a * 0xBF58476D1CE4E5B9ULL;
}

struct OpSpec {
  enum Kind { gpu_op, cpu_op, wait } kind = gpu_op;
  int device = 0;
  FnProperty prop = FnProperty::normal;
  std::vector<int> reads, writes;
  std::uint64_t salt = 0;
};

std::vector<OpSpec> make_trace(std::uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<OpSpec> ops;
  for (int i = 0; i < n; ++i) {
    OpSpec op;
    const auto r = rng() % 10;
    op.kind = r < 6 ? OpSpec::gpu_op : (r < 9 ? OpSpec::cpu_op : OpSpec::wait);
    op.device = static_cast<int>(rng() % 2);
    const FnProperty props[] = {FnProperty::normal, FnProperty::normal, FnProperty::copy_to_device,
                                FnProperty::copy_from_device};
    op.prop = props[rng() % 4];
    op.salt = rng();
    const int nr = static_cast<int>(rng() % 3);
    const int nw = op.kind == OpSpec::wait ? 0 : 1 + static_cast<int>(rng() % 2);
    for (int k = 0; k < nr; ++k) op.reads.push_back(static_cast<int>(rng() % kVars));
    for (int k = 0; k < nw; ++k) op.writes.push_back(static_cast<int>(rng() % kVars));
    if (op.kind == OpSpec::wait && op.reads.empty()) op.reads.push_back(static_cast<int>(rng() % kVars));
    ops.push_back(op);
  }
  return ops;
}

/// The op's effect, the same for the host reference, CPU ops and GPU host
/// tasks: every written row becomes a mix of itself, the read rows and the salt.
void apply(const OpSpec& op, Row* rows) {
  Row in{};
  for (int r : op.reads) {
    for (int j = 0; j < kLen; ++j) in[j] = mix(in[j], rows[r][j]);
  }
  // Reads first, then writes (a variable both read and written is read first).
  std::vector<Row> out;
  for (int w : op.writes) {
    Row o = rows[w];
    for (int j = 0; j < kLen; ++j) o[j] = mix(mix(o[j], in[j]), op.salt + static_cast<std::uint64_t>(j));
    out.push_back(o);
  }
  for (std::size_t k = 0; k < op.writes.size(); ++k) rows[op.writes[k]] = out[k];
}

std::vector<Row> serial(const std::vector<OpSpec>& ops) {
  std::vector<Row> rows(kVars);
  for (int v = 0; v < kVars; ++v) rows[v].fill(static_cast<std::uint64_t>(v + 1));
  for (const auto& op : ops) {
    if (op.kind != OpSpec::wait) apply(op, rows.data());
  }
  return rows;
}


/// Runs the trace; returns the rows as a final CPU op saw them. The rows are
/// pinned host memory, touched by CPU ops and by GPU ops' host tasks
/// (cudaLaunchHostFunc on CUDA): the streams and events order them.
std::vector<Row> run_trace(EngineKind kind, const std::vector<OpSpec>& ops, std::unique_ptr<gpu::Backend> backend,
                           gpu::RuntimeOptions ro) {
  struct Rig {
    Rig(EngineKind k, std::unique_ptr<gpu::Backend> b, gpu::RuntimeOptions o)
        : engine(engine_options(k)), rt(engine, std::move(b), o) {}
    Engine engine;
    gpu::Runtime rt;
  } rig(kind, std::move(backend), ro);
  std::vector<Var> vars;
  for (int v = 0; v < kVars; ++v) vars.push_back(rig.engine.new_variable());
  gpu::Buffer mem = rig.rt.alloc_host(sizeof(Row) * kVars);
  Row* rows = mem.as<Row>();
  for (int v = 0; v < kVars; ++v) rows[v].fill(static_cast<std::uint64_t>(v + 1));
  for (const auto& op : ops) {
    std::vector<Var> r, w;
    for (int i : op.reads) r.push_back(vars[static_cast<std::size_t>(i)]);
    for (int i : op.writes) w.push_back(vars[static_cast<std::size_t>(i)]);
    switch (op.kind) {
      case OpSpec::gpu_op:
        rig.rt.push([&op, rows](const gpu::Stream& s) { s.host_task([&op, rows] { apply(op, rows); }); },
                    Context::gpu(op.device), r, w, {.prop = op.prop});
        break;
      case OpSpec::cpu_op:
        rig.engine.push_sync([&op, rows] { apply(op, rows); }, Context::cpu(), r, w);
        break;
      case OpSpec::wait:
        rig.engine.wait_for_var(r.front());
        break;
    }
  }
  std::vector<Row> out(kVars);
  rig.engine.push_sync([&] { std::copy(rows, rows + kVars, out.begin()); }, Context::cpu(), vars, {});
  rig.engine.wait_for_all();
  rig.rt.free(mem);
  return out;
}


std::vector<Row> run(EngineKind kind, const std::vector<OpSpec>& ops, std::uint64_t seed, gpu::RuntimeOptions ro,
                     long max_delay_us) {
  return run_trace(kind, ops,
                   gpu::make_sim_backend({.devices = 2, .max_delay = std::chrono::microseconds(max_delay_us), .seed = seed}),
                   ro);
}

class GpuDifferential : public ::testing::TestWithParam<EngineKind> {};

TEST_P(GpuDifferential, RandomTracesMatchTheSerialRun) {
  const std::uint64_t base = seed_from_env(20240611);
  for (std::uint64_t round = 0; round < 6; ++round) {
    const std::uint64_t seed = base + round;
    std::printf("[gpu differential] engine=%s seed=%" PRIu64 "\n", kind_name(GetParam()), seed);
    const auto ops = make_trace(seed, 300);
    const auto want = serial(ops);
    gpu::RuntimeOptions ro;
    ro.watch = round % 2 == 0 ? gpu::WatchMode::poll : gpu::WatchMode::blocking_sync;
    const auto got = run(GetParam(), ops, seed, ro, 100);
    ASSERT_EQ(got, want) << "seed " << seed << " (ORDO_TEST_SEED=" << seed << " replays it)";
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, GpuDifferential,
                         ::testing::Values(EngineKind::naive, EngineKind::pooled, EngineKind::per_device),
                         [](const auto& p) { return std::string(kind_name(p.param)); });

// The same traces on a real GPU through the CUDA backend (host tasks run by
// cudaLaunchHostFunc, ordered by real streams and events). Skipped without one.
TEST(GpuDifferentialCuda, RandomTracesMatchTheSerialRun) {
  const gpu::Probe p = gpu::probe_cuda();
  if (!p.available()) GTEST_SKIP() << "no CUDA device: " << p.reason;
  const std::uint64_t base = seed_from_env(20240611);
  for (EngineKind kind : {EngineKind::naive, EngineKind::pooled, EngineKind::per_device}) {
    for (std::uint64_t round = 0; round < 2; ++round) {
      const std::uint64_t seed = base + round;
      std::printf("[gpu differential, cuda] engine=%s seed=%" PRIu64 "\n", kind_name(kind), seed);
      const auto ops = make_trace(seed, 300);
      gpu::RuntimeOptions ro;
      ro.devices = 2;  // two logical devices even on one GPU
      ro.watch = round % 2 == 0 ? gpu::WatchMode::poll : gpu::WatchMode::blocking_sync;
      ASSERT_EQ(run_trace(kind, ops, gpu::make_cuda_backend(), ro), serial(ops)) << "seed " << seed;
    }
  }
}

// Negative control: the same kind of trace, with the runtime told to skip its
// cross-stream waits, must go wrong - otherwise the differential above could
// not catch a missing cudaStreamWaitEvent. Two ops on different streams of
// one device write the same variable, the first one slowly.
TEST(GpuDifferentialControl, MissingCrossStreamWaitIsCaught) {
  for (bool skip : {false, true}) {
    gpu::RuntimeOptions ro;
    ro.unsafe_skip_stream_waits = skip;
    SimRig rig(EngineKind::per_device, {.devices = 1}, ro);
    Var x = rig.engine.new_variable();
    std::vector<int> order;
    std::mutex m;
    rig.rt.push(
        [&](const gpu::Stream& s) {
          s.host_task([&] {
            sleep_us(30000);
            std::lock_guard lock(m);
            order.push_back(1);
          });
        },
        Context::gpu(0), {}, {x}, {.prop = FnProperty::copy_to_device});
    rig.rt.push(
        [&](const gpu::Stream& s) {
          s.host_task([&] {
            std::lock_guard lock(m);
            order.push_back(2);
          });
        },
        Context::gpu(0), {}, {x}, {.prop = FnProperty::normal});
    rig.engine.wait_for_var(x);
    rig.rt.synchronize();
    std::lock_guard lock(m);
    if (skip) {
      EXPECT_EQ(order, (std::vector<int>{2, 1})) << "without the wait the second write overtakes the first";
    } else {
      EXPECT_EQ(order, (std::vector<int>{1, 2}));
    }
  }
}

}  // namespace
}  // namespace ordo::test
