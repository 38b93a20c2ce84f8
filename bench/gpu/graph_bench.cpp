// bench/gpu/graph_bench.cpp - a step of 100 tiny kernels on one stream,
// replayed as a captured graph (one engine op, one backend graph launch)
// against the same kernels pushed op by op (100 engine ops, an event each).
// Timed per step: the pushes (or the replay) and the wait for the step's
// variable; the graph is captured and launched once before timing. Median
// of --runs runs of --steps steps, in us per step, and the ratio (the
// issue's target on a device: captured >= 1.5x faster).
//
//   ordo_gpu_graph_bench [--sim | --cuda] [--runs N] [--steps N] [--kernels N] [--quick]
//
// --sim (default): the simulated backend (a kernel is a host task; no
// delays), which measures the engine and runtime side only. --cuda: the
// CUDA backend, with a real kernel where nvcc built graph_kernels.cu; no
// device: says so and exits 0.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ordo/gpu.hpp"
#include "ordo/graph.hpp"

namespace ordo::bench {
#if ORDO_BENCH_CUDA_KERNELS
void launch_tiny(void* stream, float* x);
#endif
}  // namespace ordo::bench

namespace {

using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Config {
  bool cuda = false;
  int runs = 5;
  int steps = 200;
  int kernels = 100;
};

/// One run: `steps` steps pushed op by op, then `steps` replays of the same
/// step captured; us per step for each.
std::pair<double, double> run_once(const Config& c, float& check) {
  ordo::Options o;
  o.kind = ordo::EngineKind::per_device;
  o.gpu_compute_workers = 1;
  ordo::Engine engine(o);
  ordo::gpu::Runtime rt(engine, c.cuda ? ordo::gpu::make_cuda_backend() : ordo::gpu::make_sim_backend({.devices = 1}));
  ordo::gpu::Buffer x = rt.alloc_device(0, sizeof(float));
  float* px = x.as<float>();
  if (!c.cuda) px[0] = 0.0F;  // the simulated device's memory is host memory; on CUDA the result is not checked
  ordo::Var v = engine.new_variable();
  auto kernel = [&c, px](const ordo::gpu::Stream& s) {
    if (!c.cuda) {
      s.host_task([px] { px[0] += 1.0F; });
      return;
    }
#if ORDO_BENCH_CUDA_KERNELS
    ordo::bench::launch_tiny(s.handle(), px);
#else
    (void)px;
#endif
  };
  auto step = [&] {
    for (int k = 0; k < c.kernels; ++k) rt.push(kernel, ordo::Context::gpu(0), {}, {v});
  };
  auto time_steps = [&](auto&& one) {
    const auto t0 = clock_type::now();
    for (int i = 0; i < c.steps; ++i) {
      one();
      engine.wait_for_var(v);
    }
    return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / c.steps;
  };
  step();  // warm: events, plans, workers
  engine.wait_for_all();
  const double pushed = time_steps(step);
  ordo::Graph g = engine.capture(step);
  engine.replay(g);  // captured into the backend graph here, untimed
  engine.wait_for_all();
  const double replayed = time_steps([&] { engine.replay(g); });
  engine.wait_for_all();
  if (!c.cuda) check = px[0];
  rt.free(x);
  return {pushed, replayed};
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--cuda") {
      c.cuda = true;
    } else if (a == "--sim") {
      c.cuda = false;
    } else if (a == "--runs") {
      c.runs = std::max(1, next());
    } else if (a == "--steps") {
      c.steps = std::max(1, next());
    } else if (a == "--kernels") {
      c.kernels = std::max(1, next());
    } else if (a == "--quick") {
      c.runs = 1;
      c.steps = 20;
    } else {
      std::fprintf(stderr, "usage: %s [--sim | --cuda] [--runs N] [--steps N] [--kernels N] [--quick]\n", argv[0]);
      return 2;
    }
  }
  if (c.cuda) {
    const ordo::gpu::Probe p = ordo::gpu::probe_cuda();
    if (!p.available()) {
      std::printf("no GPU: %s\n", p.reason.c_str());
      return 0;
    }
#if !ORDO_BENCH_CUDA_KERNELS
    std::printf("built without nvcc: no kernel to launch on CUDA\n");
    return 0;
#endif
  }
  std::vector<double> pushed, replayed;
  float check = 0;
  try {
    for (int r = 0; r < c.runs; ++r) {
      const auto [p, g] = run_once(c, check);
      pushed.push_back(p);
      replayed.push_back(g);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ordo_gpu_graph_bench: %s\n", e.what());
    return 1;
  }
  const double expect = static_cast<double>(c.kernels) * (2.0 * c.steps + 2.0);
  if (!c.cuda && static_cast<double>(check) != expect) {
    std::fprintf(stderr, "wrong result: %g kernels ran, %g expected\n", static_cast<double>(check), expect);
    return 1;
  }
  const double mp = median(pushed), mg = median(replayed);
  std::printf("backend %s, %d kernels per step, %d steps, median of %d runs (us per step)\n",
              c.cuda ? "cuda" : "simulated", c.kernels, c.steps, c.runs);
  std::printf("pushed op by op   %10.1f us  (spread %.1f-%.1f)\n", mp, *std::min_element(pushed.begin(), pushed.end()),
              *std::max_element(pushed.begin(), pushed.end()));
  std::printf("captured, replayed %9.1f us  (spread %.1f-%.1f)\n", mg,
              *std::min_element(replayed.begin(), replayed.end()), *std::max_element(replayed.begin(), replayed.end()));
  std::printf("captured speed-up  %9.2fx  (target on a device: >= 1.5x)\n", mp / mg);
  return 0;
}
