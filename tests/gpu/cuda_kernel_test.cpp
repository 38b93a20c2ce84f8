// tests/gpu/cuda_kernel_test.cpp - ordo::gpu with real CUDA kernels on a real
// device: random kernel traces across two logical devices' compute and copy
// streams against a host reference (both watch modes), a negative control
// that proves the trace would catch a missing cudaStreamWaitEvent, launch
// errors and device faults as op errors with the CUDA error's name, and a
// coroutine awaiting a kernel, memory of a deleted variable reused only after
// its kernel. Skipped (shown as skipped) without a device,
// or when the build had no nvcc for the kernels.
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.hpp"
#include "ordo/coro.hpp"
#include "ordo/task.hpp"
#if ORDO_TEST_CUDA_KERNELS
#include "gpu/cuda_kernels.hpp"
#endif

namespace ordo::test {
namespace {

#if !ORDO_TEST_CUDA_KERNELS

TEST(GpuCudaKernels, NeedNvcc) { GTEST_SKIP() << "built without nvcc: no CUDA kernels to run"; }

#else

namespace k = kernels;
using gpu::Stream;

#define ORDO_NEED_DEVICE()                                                   \
  do {                                                                       \
    const gpu::Probe probe = gpu::probe_cuda();                              \
    if (!probe.available()) GTEST_SKIP() << "no CUDA device: " << probe.reason; \
  } while (0)

constexpr int kElems = 4096;
constexpr std::size_t kBytes = kElems * sizeof(std::uint32_t);

struct KernelOp {
  int device;        ///< logical device 0 or 1
  int write;         ///< variable written
  int read;          ///< variable read, or -1
  std::uint32_t a, b;
  std::uint32_t spin_ns;
  bool copy_stream;  ///< run on the device's H2D stream instead of a compute stream
};

std::vector<KernelOp> make_trace(std::uint64_t seed, int vars, int ops) {
  std::mt19937_64 rng(seed);
  std::vector<KernelOp> t;
  for (int i = 0; i < ops; ++i) {
    KernelOp op{};
    op.device = static_cast<int>(rng() % 2);
    op.write = static_cast<int>(rng() % static_cast<std::uint64_t>(vars));
    op.read = rng() % 3 == 0 ? -1 : static_cast<int>(rng() % static_cast<std::uint64_t>(vars));
    if (op.read == op.write) op.read = -1;
    op.a = static_cast<std::uint32_t>(rng()) | 1U;
    op.b = static_cast<std::uint32_t>(rng());
    op.spin_ns = static_cast<std::uint32_t>(rng() % 30000);
    op.copy_stream = rng() % 8 == 0;
    t.push_back(op);
  }
  return t;
}

std::uint32_t initial(int var, int i) { return static_cast<std::uint32_t>(var * 100003 + i); }

std::vector<std::vector<std::uint32_t>> reference(const std::vector<KernelOp>& trace, int vars) {
  std::vector<std::vector<std::uint32_t>> x(vars, std::vector<std::uint32_t>(kElems));
  for (int v = 0; v < vars; ++v) {
    for (int i = 0; i < kElems; ++i) x[v][i] = initial(v, i);
  }
  for (const KernelOp& op : trace) {
    for (int i = 0; i < kElems; ++i) x[op.write][i] = x[op.write][i] * op.a + op.b + (op.read >= 0 ? x[op.read][i] : 0U);
  }
  return x;
}

/// Runs `trace` as engine ops: H2D copies in, one kernel per op, D2H copies
/// out, and a CPU op per variable comparing with `want`. Returns the number of
/// variables whose final contents differ.
int run_kernel_trace(EngineKind kind, gpu::WatchMode watch, const std::vector<KernelOp>& trace, int vars,
                     const std::vector<std::vector<std::uint32_t>>& want) {
  Engine engine(engine_options(kind));
  gpu::Runtime rt(engine, gpu::make_cuda_backend(), {.devices = 2, .watch = watch});
  std::vector<gpu::Buffer> dev(vars), in(vars), out(vars);
  std::vector<Var> dv(vars), hv(vars);
  for (int v = 0; v < vars; ++v) {
    dev[v] = rt.alloc_device(0, kBytes);
    in[v] = rt.alloc_host(kBytes);
    out[v] = rt.alloc_host(kBytes);
    for (int i = 0; i < kElems; ++i) in[v].as<std::uint32_t>()[i] = initial(v, i);
    dv[v] = engine.new_variable();
    hv[v] = engine.new_variable();
    rt.push([&, v](const Stream& s) { s.copy(dev[v].data(), in[v].data(), kBytes); }, Context::gpu(v % 2), {},
            {dv[v]}, {.prop = FnProperty::copy_to_device});
  }
  for (const KernelOp& op : trace) {
    auto* x = dev[op.write].as<std::uint32_t>();
    const std::uint32_t* src = op.read >= 0 ? dev[op.read].as<std::uint32_t>() : nullptr;
    std::vector<Var> reads;
    if (op.read >= 0) reads.push_back(dv[op.read]);
    rt.push([=](const Stream& s) { k::affine(s.handle(), x, src, kElems, op.a, op.b, op.spin_ns); },
            Context::gpu(op.device), reads, {dv[op.write]},
            {.prop = op.copy_stream ? FnProperty::copy_to_device : FnProperty::normal});
  }
  std::atomic<int> wrong{0};
  for (int v = 0; v < vars; ++v) {
    rt.push([&, v](const Stream& s) { s.copy(out[v].data(), dev[v].data(), kBytes); }, Context::gpu((v + 1) % 2),
            {dv[v]}, {hv[v]}, {.prop = FnProperty::copy_from_device});
    engine.push_sync(
        [&, v] {
          const auto* got = out[v].as<std::uint32_t>();
          if (!std::equal(got, got + kElems, want[v].begin())) wrong.fetch_add(1);
        },
        Context::cpu(), {hv[v]}, {});
  }
  engine.wait_for_all();
  EXPECT_GT(rt.stats().stream_waits, 0U);
  for (int v = 0; v < vars; ++v) {
    for (gpu::Buffer b : {dev[v], in[v], out[v]}) rt.free(b);
  }
  return wrong.load();
}

struct TraceCase {
  EngineKind kind;
  gpu::WatchMode watch;
};

class GpuCudaKernels : public ::testing::TestWithParam<TraceCase> {};

TEST_P(GpuCudaKernels, RandomKernelTracesMatchTheHostReference) {
  ORDO_NEED_DEVICE();
  constexpr int vars = 24;
  const std::uint64_t base = seed_from_env(std::random_device{}());
  for (std::uint64_t seed = base; seed < base + 3; ++seed) {
    std::printf("[gpu cuda kernels] engine=%s watch=%s seed=%" PRIu64 "\n", kind_name(GetParam().kind),
                GetParam().watch == gpu::WatchMode::poll ? "poll" : "blocking_sync", seed);
    const auto trace = make_trace(seed, vars, 600);
    EXPECT_EQ(run_kernel_trace(GetParam().kind, GetParam().watch, trace, vars, reference(trace, vars)), 0)
        << "seed " << seed << " (ORDO_TEST_SEED=" << seed << " replays it)";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Engines, GpuCudaKernels,
    ::testing::Values(TraceCase{EngineKind::per_device, gpu::WatchMode::poll},
                      TraceCase{EngineKind::per_device, gpu::WatchMode::blocking_sync},
                      TraceCase{EngineKind::pooled, gpu::WatchMode::poll},
                      TraceCase{EngineKind::naive, gpu::WatchMode::blocking_sync}),
    [](const auto& p) {
      return std::string(kind_name(p.param.kind)) + (p.param.watch == gpu::WatchMode::poll ? "_poll" : "_blocking");
    });

/// A slow kernel on device 0 fills x; a kernel on device 1 copies x into
/// pinned host memory y; a CPU op then reads y. Returns what it read.
std::uint32_t producer_consumer(bool skip_waits) {
  Engine engine(engine_options(EngineKind::per_device));
  gpu::Runtime rt(engine, gpu::make_cuda_backend(), {.devices = 2, .unsafe_skip_stream_waits = skip_waits});
  gpu::Buffer x = rt.alloc_device(0, kBytes);
  gpu::Buffer zero = rt.alloc_host(kBytes);
  gpu::Buffer y = rt.alloc_host(kBytes);  // pinned, so the kernel writes it directly
  std::fill_n(zero.as<std::uint32_t>(), kElems, 0U);
  std::fill_n(y.as<std::uint32_t>(), kElems, 0U);
  Var vx = engine.new_variable(), vy = engine.new_variable();
  rt.push([&](const Stream& s) { s.copy(x.data(), zero.data(), kBytes); }, Context::gpu(0), {}, {vx},
          {.prop = FnProperty::copy_to_device});
  engine.wait_for_all();
  rt.push([&](const Stream& s) { k::fill(s.handle(), x.as<std::uint32_t>(), kElems, 7U, 2'000'000); },
          Context::gpu(0), {}, {vx});
  rt.push([&](const Stream& s) { k::affine(s.handle(), y.as<std::uint32_t>(), x.as<std::uint32_t>(), kElems, 0U, 0U, 0U); },
          Context::gpu(1), {vx}, {vy});
  std::uint32_t seen = 0;
  engine.push_sync([&] { seen = y.as<std::uint32_t>()[kElems - 1]; }, Context::cpu(), {vy}, {});
  engine.wait_for_all();
  for (gpu::Buffer b : {x, zero, y}) rt.free(b);
  return seen;
}

// The control: the same two kernels without the cross-stream wait read x
// before the slow producer wrote it. So the trace test above, which passes
// with the waits, would fail if ordo left one out.
TEST(GpuCudaKernelsControl, MissingCrossStreamWaitIsCaught) {
  ORDO_NEED_DEVICE();
  EXPECT_EQ(producer_consumer(false), 7U);
  EXPECT_NE(producer_consumer(true), 7U) << "a consumer on another stream that skipped its wait saw the producer's "
                                            "result: this control cannot tell a missing wait";
}

TEST(GpuCudaKernelsErrors, LaunchErrorIsAnOpErrorWithItsName) {
  ORDO_NEED_DEVICE();
  Engine engine(engine_options(EngineKind::per_device));
  gpu::Runtime rt(engine, gpu::make_cuda_backend(), {.devices = 1});
  Var x = engine.new_variable(), y = engine.new_variable(), hy = engine.new_variable();
  rt.push([](const Stream& s) { k::bad_launch(s.handle()); }, Context::gpu(0), {}, {x});
  bool consumer_ran = false;
  engine.push_sync([&] { consumer_ran = true; }, Context::cpu(), {x}, {});
  const std::string name = gpu_error_name([&] { engine.wait_for_var(x); }, "a refused launch must fail its op");
  EXPECT_EQ(name, k::bad_launch_error_name());
  EXPECT_NE(name, "cudaSuccess");
  // The error is the op's alone: the next GPU op on this worker's thread runs.
  gpu::Buffer d = rt.alloc_device(0, kBytes), h = rt.alloc_host(kBytes);
  rt.push([&](const Stream& s) { k::fill(s.handle(), d.as<std::uint32_t>(), kElems, 5U, 0U); }, Context::gpu(0), {},
          {y});
  rt.push([&](const Stream& s) { s.copy(h.data(), d.data(), kBytes); }, Context::gpu(0), {y}, {hy},
          {.prop = FnProperty::copy_from_device});
  engine.wait_for_var(hy);
  EXPECT_EQ(h.as<std::uint32_t>()[kElems - 1], 5U);
  EXPECT_FALSE(consumer_ran) << "the consumer of a failed op is skipped";
  try {
    engine.wait_for_all();
  } catch (const gpu::GpuError&) {
  }
  rt.free(d);
  rt.free(h);
}

// A fault makes the CUDA context unusable for the whole process, so it runs
// in a child process (gtest's threadsafe death test re-runs this binary).
TEST(GpuCudaKernelsErrors, DeviceFaultReachesTheCpuConsumerWithItsName) {
  ORDO_NEED_DEVICE();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::string name = "(nothing thrown)";
        {
          Engine engine(engine_options(EngineKind::per_device));
          gpu::Runtime rt(engine, gpu::make_cuda_backend(), {.devices = 1});
          Var x = engine.new_variable();
          rt.push([](const Stream& s) { k::fault(s.handle()); }, Context::gpu(0), {}, {x});
          engine.push_sync([] {}, Context::cpu(), {x}, {});
          try {
            engine.wait_for_var(x);
          } catch (const gpu::GpuError& e) {
            name = e.name();
          }
          try {
            engine.wait_for_all();
          } catch (...) {
          }
        }  // the runtime and engine shut down after the fault without hanging
        std::fprintf(stderr, "wait_for_var threw %s\n", name.c_str());
        std::exit(name == "cudaErrorIllegalAddress" ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "wait_for_var threw cudaErrorIllegalAddress");
}

// Memory of a deleted variable goes back to the pool only once the kernel
// writing it has finished: a 20 ms kernel, then delete_variable, then an
// allocation of the same size, which must not get that memory.
TEST(GpuCudaKernelsMemory, DeletedVariableMemoryReusedOnlyAfterItsKernel) {
  ORDO_NEED_DEVICE();
  Engine engine(engine_options(EngineKind::per_device));
  gpu::Runtime rt(engine, gpu::make_cuda_backend(), {.devices = 1});
  Var x = engine.new_variable();
  gpu::Buffer b = rt.alloc_device(0, kBytes);
  void* const old = b.data();
  rt.push([p = b.as<std::uint32_t>()](const Stream& s) { k::fill(s.handle(), p, kElems, 3U, 20'000'000); },
          Context::gpu(0), {}, {x});
  rt.delete_variable(x, b);
  gpu::Buffer early = rt.alloc_device(0, kBytes);
  EXPECT_NE(early.data(), old) << "reused while the kernel still writes it";
  engine.wait_for_all();  // the held delete counts as in flight
  gpu::Buffer later = rt.alloc_device(0, kBytes);
  EXPECT_EQ(later.data(), old) << "returned to the pool once its kernel finished";
  rt.free(early);
  rt.free(later);
}

Task<std::uint32_t> lease_and_fill(Engine& engine, gpu::Runtime& rt, Var x, gpu::Buffer d, gpu::Buffer h) {
  Lease lease = co_await ordo::push(engine, reads(), writes(x));
  Stream s = rt.stream(Context::gpu(0));
  k::fill(s.handle(), d.as<std::uint32_t>(), kElems, 42U, 1'000'000);
  s.copy(h.data(), d.data(), kBytes);
  co_await gpu::on(s);
  const std::uint32_t v = h.as<std::uint32_t>()[kElems - 1];
  lease.release();
  co_return v;
}

Task<void> launch_badly(gpu::Runtime& rt) {
  Stream s = rt.stream(Context::gpu(0));
  k::bad_launch(s.handle());
  co_await gpu::on(s);
}

TEST(GpuCudaKernelsCoroutine, AwaitsAKernelAndItsCopy) {
  ORDO_NEED_DEVICE();
  Engine engine(engine_options(EngineKind::per_device));
  gpu::Runtime rt(engine, gpu::make_cuda_backend(), {.devices = 1});
  gpu::Buffer d = rt.alloc_device(0, kBytes), h = rt.alloc_host(kBytes);
  std::fill_n(h.as<std::uint32_t>(), kElems, 0U);
  Var x = engine.new_variable();
  EXPECT_EQ(sync_wait(lease_and_fill(engine, rt, x, d, h)), 42U);
  engine.wait_for_all();
  rt.free(d);
  rt.free(h);
}

TEST(GpuCudaKernelsCoroutine, LaunchErrorIsRethrownByTheAwait) {
  ORDO_NEED_DEVICE();
  Engine engine(engine_options(EngineKind::per_device));
  gpu::Runtime rt(engine, gpu::make_cuda_backend(), {.devices = 1});
  EXPECT_EQ(gpu_error_name([&] { sync_wait(launch_badly(rt)); }, "co_await gpu::on after a refused launch must throw"),
            k::bad_launch_error_name());
  engine.wait_for_all();
}

#endif  // ORDO_TEST_CUDA_KERNELS

}  // namespace
}  // namespace ordo::test
