// bench/gpu/gpu_bench.cu - ordo::gpu against hand-written CUDA, on a GPU only
// (without one it says so and exits 0). Median of --runs (default 5), in ms.
//
//  G1 chain: 10,000 tiny kernels in one dependency chain alternating between
//     2 streams: engine ops (each waits on the previous op's event on the
//     device) vs raw launches + cudaEventRecord/cudaStreamWaitEvent.
//  G2 pipeline: 64 batches of H2D copy -> kernel -> D2H copy: engine ops on
//     the copy and compute streams vs a hand-written 3-stream version.
// Each figure is taken with both watcher modes (poll, blocking_sync), after
// one untimed warm-up run; G1 also with a pre-built operator, G2 also with
// one wait_for_all at the end instead of a wait_for_var per batch, with one
// compute stream, and with the device's own span of each run (timing events
// from the start to the last D2H copy's end, and to the first H2D copy). The last
// lines compare with issue 5's targets: G1 per-op time within 2x of raw,
// G2 at >= 90% of the hand-written version's throughput.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ordo/gpu.hpp"

namespace {

__global__ void tiny(float* x) {
  if (threadIdx.x == 0) x[0] += 1.0F;
}
__global__ void scale(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 2.0F + 1.0F;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw ordo::gpu::GpuError(static_cast<int>(e), cudaGetErrorName(e), what);
}

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr int kChain = 10000;
constexpr int kBatches = 64;
constexpr int kBatchFloats = 1 << 20;

double chain_raw() {
  cudaStream_t s[2];
  cudaEvent_t e[2];
  for (int i = 0; i < 2; ++i) {
    check(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking), "stream");
    check(cudaEventCreateWithFlags(&e[i], cudaEventDisableTiming), "event");
  }
  float* x = nullptr;
  check(cudaMalloc(&x, sizeof(float)), "malloc");
  check(cudaMemset(x, 0, sizeof(float)), "memset");
  const auto t0 = clock_type::now();
  for (int i = 0; i < kChain; ++i) {
    cudaStream_t cur = s[i % 2];
    if (i > 0) check(cudaStreamWaitEvent(cur, e[(i - 1) % 2], 0), "wait");
    tiny<<<1, 32, 0, cur>>>(x);
    check(cudaEventRecord(e[i % 2], cur), "record");
  }
  check(cudaEventSynchronize(e[(kChain - 1) % 2]), "sync");
  const double t = ms_since(t0);
  float h = 0;
  check(cudaMemcpy(&h, x, sizeof(float), cudaMemcpyDeviceToHost), "copy");
  if (h != static_cast<float>(kChain)) std::fprintf(stderr, "G1 raw: wrong result %g\n", h);
  cudaFree(x);
  for (int i = 0; i < 2; ++i) {
    cudaEventDestroy(e[i]);
    cudaStreamDestroy(s[i]);
  }
  return t;
}

double chain_ordo(ordo::gpu::WatchMode watch, bool prebuilt) {
  ordo::Engine engine;
  ordo::gpu::Runtime rt(engine, ordo::gpu::make_cuda_backend(), {.devices = 1, .watch = watch});
  ordo::gpu::Buffer x = rt.alloc_device(0, sizeof(float));
  check(cudaMemset(x.data(), 0, sizeof(float)), "memset");
  ordo::Var v = engine.new_variable();
  auto body = [p = x.as<float>()](const ordo::gpu::Stream& s) { tiny<<<1, 32, 0, s.native<cudaStream_t>()>>>(p); };
  ordo::gpu::Operator ops[2];
  if (prebuilt) {
    ops[0] = rt.new_operator(body, {}, {v}, {.prop = ordo::FnProperty::normal});
    ops[1] = rt.new_operator(body, {}, {v}, {.prop = ordo::FnProperty::copy_to_device});
  }
  const auto t0 = clock_type::now();
  for (int i = 0; i < kChain; ++i) {
    // Alternate between a compute and a copy stream: every op waits for the previous one on the device.
    if (prebuilt) {
      rt.push(ops[i % 2], ordo::Context::gpu(0));
    } else {
      rt.push(body, ordo::Context::gpu(0), {}, {v},
              {.prop = i % 2 == 0 ? ordo::FnProperty::normal : ordo::FnProperty::copy_to_device});
    }
  }
  engine.wait_for_var(v);  // held until the last kernel finished
  const double t = ms_since(t0);
  if (prebuilt) {
    for (auto& op : ops) rt.delete_operator(op);
  }
  float h = 0;
  check(cudaMemcpy(&h, x.data(), sizeof(float), cudaMemcpyDeviceToHost), "copy");
  if (h != static_cast<float>(kChain)) std::fprintf(stderr, "G1 ordo: wrong result %g\n", h);
  rt.free(x);
  return t;
}

struct PipelineData {
  std::vector<float*> host_in, host_out, dev;
  // Timing events around a run's device work, from the first H2D copy's
  // stream position to the last D2H copy: the GPU's own span of the run.
  cudaEvent_t span_start = nullptr, span_end = nullptr, first_copy = nullptr;
  double last_span_ms = 0;
  double last_first_ms = 0;  ///< from span_start to the first H2D copy's start
};

double gpu_span_ms(PipelineData& d) {
  float ms = 0, first = 0;
  check(cudaEventSynchronize(d.span_end), "sync");
  check(cudaEventElapsedTime(&ms, d.span_start, d.span_end), "elapsed");
  check(cudaEventElapsedTime(&first, d.span_start, d.first_copy), "elapsed");
  d.last_first_ms = first;
  return ms;
}

double pipeline_raw(ordo::gpu::Runtime& rt, PipelineData& d) {
  cudaStream_t h2d, comp, d2h;
  for (cudaStream_t* s : {&h2d, &comp, &d2h}) check(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "stream");
  std::vector<cudaEvent_t> in(kBatches), done(kBatches);
  for (int b = 0; b < kBatches; ++b) {
    check(cudaEventCreateWithFlags(&in[b], cudaEventDisableTiming), "event");
    check(cudaEventCreateWithFlags(&done[b], cudaEventDisableTiming), "event");
  }
  const std::size_t bytes = kBatchFloats * sizeof(float);
  const auto t0 = clock_type::now();
  check(cudaEventRecord(d.span_start, h2d), "record");
  for (int b = 0; b < kBatches; ++b) {
    if (b == 0) check(cudaEventRecord(d.first_copy, h2d), "record");
    check(cudaMemcpyAsync(d.dev[b], d.host_in[b], bytes, cudaMemcpyHostToDevice, h2d), "h2d");
    check(cudaEventRecord(in[b], h2d), "record");
    check(cudaStreamWaitEvent(comp, in[b], 0), "wait");
    scale<<<(kBatchFloats + 255) / 256, 256, 0, comp>>>(d.dev[b], kBatchFloats);
    check(cudaEventRecord(done[b], comp), "record");
    check(cudaStreamWaitEvent(d2h, done[b], 0), "wait");
    check(cudaMemcpyAsync(d.host_out[b], d.dev[b], bytes, cudaMemcpyDeviceToHost, d2h), "d2h");
  }
  check(cudaEventRecord(d.span_end, d2h), "record");
  check(cudaStreamSynchronize(d2h), "sync");
  const double t = ms_since(t0);
  d.last_span_ms = gpu_span_ms(d);
  for (int b = 0; b < kBatches; ++b) {
    cudaEventDestroy(in[b]);
    cudaEventDestroy(done[b]);
  }
  for (cudaStream_t s : {h2d, comp, d2h}) cudaStreamDestroy(s);
  (void)rt;
  return t;
}

enum class G2Wait { each, all };

double pipeline_ordo(ordo::gpu::Runtime& rt, PipelineData& d, G2Wait how = G2Wait::each) {
  ordo::Engine& engine = rt.engine();
  const std::size_t bytes = kBatchFloats * sizeof(float);
  std::vector<ordo::Var> in(kBatches), dev(kBatches), out(kBatches);
  for (int b = 0; b < kBatches; ++b) {
    in[b] = engine.new_variable();
    dev[b] = engine.new_variable();
    out[b] = engine.new_variable();
  }
  const auto t0 = clock_type::now();
  // The H2D copies' stream is idle here: the marker is "now" on the device.
  check(cudaEventRecord(d.span_start, rt.stream(ordo::Context::gpu(0), ordo::FnProperty::copy_to_device)
                                          .native<cudaStream_t>()), "record");
  for (int b = 0; b < kBatches; ++b) {
    rt.push([&, b](const ordo::gpu::Stream& s) {
      if (b == 0) check(cudaEventRecord(d.first_copy, s.native<cudaStream_t>()), "record");
      s.copy(d.dev[b], d.host_in[b], bytes);
    }, ordo::Context::gpu(0), {in[b]}, {dev[b]}, {.prop = ordo::FnProperty::copy_to_device});
    rt.push([&, b](const ordo::gpu::Stream& s) {
      scale<<<(kBatchFloats + 255) / 256, 256, 0, s.native<cudaStream_t>()>>>(d.dev[b], kBatchFloats);
    }, ordo::Context::gpu(0), {}, {dev[b]});
    rt.push([&, b](const ordo::gpu::Stream& s) {
      s.copy(d.host_out[b], d.dev[b], bytes);
      if (b == kBatches - 1) check(cudaEventRecord(d.span_end, s.native<cudaStream_t>()), "record");
    }, ordo::Context::gpu(0), {dev[b]}, {out[b]}, {.prop = ordo::FnProperty::copy_from_device});
  }
  if (how == G2Wait::each) {
    for (int b = 0; b < kBatches; ++b) engine.wait_for_var(out[b]);  // each batch's result on the CPU
  } else {
    engine.wait_for_all();  // one wait, like the hand-written cudaStreamSynchronize
  }
  const double t = ms_since(t0);
  d.last_span_ms = gpu_span_ms(d);
  for (int b = 0; b < kBatches; ++b) {
    for (ordo::Var v : {in[b], dev[b], out[b]}) engine.delete_variable(v);
  }
  engine.wait_for_all();
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
    if (std::strcmp(argv[i], "--quick") == 0) runs = 1;
  }
  const ordo::gpu::Probe p = ordo::gpu::probe_cuda();
  if (!p.available()) {
    std::printf("ordo_gpu_bench: no GPU (%s): nothing measured\n", p.reason.c_str());
    return 0;
  }
  using ordo::gpu::WatchMode;
  const std::pair<WatchMode, const char*> modes[] = {{WatchMode::poll, "poll"},
                                                     {WatchMode::blocking_sync, "blocking_sync"}};
  try {
    // G1: raw, then ordo per watch mode, ad-hoc pushes and a pre-built operator.
    (void)chain_raw();  // warm-up: context, module load
    std::vector<double> raw;
    for (int r = 0; r < runs; ++r) raw.push_back(chain_raw());
    const double g1_raw = median(raw);
    std::printf("G1 chain of %d tiny kernels on 2 streams: raw CUDA %.2f ms (%.2f us per kernel, median of %d)\n",
                kChain, g1_raw, g1_raw * 1000.0 / kChain, runs);
    double g1_best = 1e300;
    for (const auto& [mode, mode_name] : modes) {
      for (bool prebuilt : {false, true}) {
        (void)chain_ordo(mode, prebuilt);
        std::vector<double> ord;
        for (int r = 0; r < runs; ++r) ord.push_back(chain_ordo(mode, prebuilt));
        const double t = median(ord);
        g1_best = std::min(g1_best, t);
        std::printf("G1   ordo %-13s %-8s %.2f ms (%.2f us per op), %.2fx raw\n", mode_name,
                    prebuilt ? "operator" : "push", t, t * 1000.0 / kChain, t / g1_raw);
        std::printf("RESULT bench=G1 engine=ordo watch=%s mode=%s ms=%.3f raw_ms=%.3f ratio=%.3f\n", mode_name,
                    prebuilt ? "operator" : "push", t, g1_raw, t / g1_raw);
      }
    }

    // G2: the pipeline, hand-written vs ordo per watch mode (and, for
    // poll, with one compute stream like the hand-written version).
    struct G2Config {
      WatchMode mode;
      const char* mode_name;
      unsigned compute_streams;  // 0: the runtime's default (one per GPU compute worker)
    };
    const G2Config g2_configs[] = {{WatchMode::poll, "poll", 0}, {WatchMode::blocking_sync, "blocking_sync", 0},
                                   {WatchMode::poll, "poll", 1}};
    double g2_raw = 0, g2_best = 1e300;
    for (const G2Config& cfg : g2_configs) {
      const char* mode_name = cfg.mode_name;
      ordo::Engine engine;
      ordo::gpu::Runtime rt(engine, ordo::gpu::make_cuda_backend(),
                            {.devices = 1, .compute_streams = cfg.compute_streams, .watch = cfg.mode});
      PipelineData d;
      check(cudaEventCreate(&d.span_start), "event");
      check(cudaEventCreate(&d.span_end), "event");
      check(cudaEventCreate(&d.first_copy), "event");
      std::vector<ordo::gpu::Buffer> bufs;
      for (int b = 0; b < kBatches; ++b) {
        for (auto* list : {&d.host_in, &d.host_out}) {
          bufs.push_back(rt.alloc_host(kBatchFloats * sizeof(float)));
          std::memset(bufs.back().data(), 0, kBatchFloats * sizeof(float));
          list->push_back(bufs.back().as<float>());
        }
        bufs.push_back(rt.alloc_device(0, kBatchFloats * sizeof(float)));
        d.dev.push_back(bufs.back().as<float>());
      }
      std::vector<double> hand, ord, ord_all, hand_span, ord_span, hand_first, ord_first;
      (void)pipeline_raw(rt, d);
      (void)pipeline_ordo(rt, d);
      for (int r = 0; r < runs; ++r) {
        hand.push_back(pipeline_raw(rt, d));
        hand_span.push_back(d.last_span_ms);
        hand_first.push_back(d.last_first_ms);
        ord.push_back(pipeline_ordo(rt, d));
        ord_span.push_back(d.last_span_ms);
        ord_first.push_back(d.last_first_ms);
        ord_all.push_back(pipeline_ordo(rt, d, G2Wait::all));
      }
      const double h = median(hand), o = median(ord), oa = median(ord_all);
      const char* streams = cfg.compute_streams == 1 ? ", 1 compute stream" : "";
      if (cfg.compute_streams == 0) {
        g2_raw = g2_raw == 0 ? h : std::min(g2_raw, h);
        g2_best = std::min(g2_best, o);
      }
      std::printf("G2 pipeline of %d batches (H2D, kernel, D2H; 4 MiB each), watch %s%s: hand-written 3 streams %.2f ms, "
                  "ordo ops %.2f ms: ordo at %.0f%% of hand-written (median of %d)\n",
                  kBatches, mode_name, streams, h, o, 100.0 * h / o, runs);
      std::printf("RESULT bench=G2 engine=ordo watch=%s compute_streams=%u ms=%.3f hand_ms=%.3f fraction=%.3f\n",
                  mode_name, cfg.compute_streams, o, h, h / o);
      std::printf("G2   the same, one wait_for_all instead of a wait_for_var per batch: %.2f ms: %.0f%% of hand-written\n",
                  oa, 100.0 * h / oa);
      std::printf("G2   device span (from the start to the last D2H's end): hand-written %.2f ms, ordo %.2f ms; "
                  "of it before the first H2D copy: %.3f ms, %.3f ms\n",
                  median(hand_span), median(ord_span), median(hand_first), median(ord_first));
      for (auto& b : bufs) rt.free(b);
      cudaEventDestroy(d.span_start);
      cudaEventDestroy(d.span_end);
      cudaEventDestroy(d.first_copy);
    }
    std::printf("targets: G1 best %.2fx raw (<= 2x: %s); G2 best at %.0f%% of hand-written (>= 90%%: %s)\n",
                g1_best / g1_raw, g1_best / g1_raw <= 2.0 ? "met" : "MISSED", 100.0 * g2_raw / g2_best,
                g2_raw / g2_best >= 0.9 ? "met" : "MISSED");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ordo_gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
