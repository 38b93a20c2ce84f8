// examples/gpu_train.cpp - the two-device training step of the dependency
// engine note (docs/: reference/dependency-engine-note.md) as ordo ops:
//
//   data[gpu0].copyfrom(data[0:50]); data[gpu1].copyfrom(data[50:100])
//   forward + backward on each device
//   fc*_wgrad[cpu] = fc*_wgrad[gpu0] + fc*_wgrad[gpu1]; fc*_weight[cpu] -= lr * fc*_wgrad[cpu]
//   fc*_weight[cpu].copyto(fc*_weight[gpu0], fc*_weight[gpu1])
//
// Every step is an op naming what it reads and writes; the engine overlaps the
// rest: fc2's gradient is copied to the host (device-to-host stream) while
// fc1's backward still runs (compute stream), the fc2 update runs on the CPU
// meanwhile, and the next step's forward of a layer starts as soon as that
// layer's weights are back. GPU ops complete when enqueued (their successors
// on other streams wait on the device); the CPU update waits for the copies
// to have *finished*. The result is checked against a serial computation.
//
//   gpu_train            CUDA when a device is there (two logical devices on one GPU), else simulated
//   gpu_train --sim      the simulated stream backend (CI)
//   gpu_train --cuda     CUDA or fail
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_train_kernels.hpp"
#include "ordo/gpu.hpp"
#include "ordo/storage.hpp"

namespace {

using gpu_train::Kernels;

constexpr int kIn = 32, kHidden = 64, kOut = 8, kBatch = 100, kDevices = 2, kSteps = 5;
constexpr int kPer = kBatch / kDevices;
constexpr float kLr = 0.05F;

/// Host kernels: the loops enqueued as host tasks (the simulated backend runs
/// them on its stream threads, with device memory being host memory).
struct HostKernels final : Kernels {
  ordo::gpu::Runtime* rt = nullptr;
  void forward(void* s, const float* w, const float* x, float* out, int rows, int in, int batch, bool relu) override {
    enqueue(s, [=] { gpu_train::forward_host(w, x, out, rows, in, batch, relu); });
  }
  void loss_grad(void* s, const float* y, const float* label, float* g, int n, float scale) override {
    enqueue(s, [=] { gpu_train::loss_grad_host(y, label, g, n, scale); });
  }
  void weight_grad(void* s, const float* g, const float* a, float* dw, int rows, int cols, int batch) override {
    enqueue(s, [=] { gpu_train::weight_grad_host(g, a, dw, rows, cols, batch); });
  }
  void input_grad(void* s, const float* w, const float* g, const float* h, float* dh, int rows, int cols,
                  int batch) override {
    enqueue(s, [=] { gpu_train::input_grad_host(w, g, h, dh, rows, cols, batch); });
  }
  void enqueue(void* s, ordo::gpu::HostFn fn) const { rt->backend().host_task(s, std::move(fn)); }
};

struct Host {
  std::vector<float> x, label, w1, w2;
};

Host make_problem() {
  std::mt19937 rng(42);
  std::normal_distribution<float> n(0.0F, 0.3F);
  Host h;
  h.x.resize(kBatch * kIn);
  h.label.resize(kBatch * kOut);
  h.w1.resize(kHidden * kIn);
  h.w2.resize(kOut * kHidden);
  for (auto* v : {&h.x, &h.label, &h.w1, &h.w2}) {
    for (float& f : *v) f = n(rng);
  }
  return h;
}

/// The serial computation: the same loops, devices one after the other.
void serial(Host& h) {
  std::vector<float> hid(kPer * kHidden), y(kPer * kOut), g2(kPer * kOut), dh(kPer * kHidden);
  std::vector<float> dw1[kDevices], dw2[kDevices];
  for (int step = 0; step < kSteps; ++step) {
    for (int d = 0; d < kDevices; ++d) {
      const float* x = h.x.data() + d * kPer * kIn;
      const float* label = h.label.data() + d * kPer * kOut;
      dw1[d].resize(kHidden * kIn);
      dw2[d].resize(kOut * kHidden);
      gpu_train::forward_host(h.w1.data(), x, hid.data(), kHidden, kIn, kPer, true);
      gpu_train::forward_host(h.w2.data(), hid.data(), y.data(), kOut, kHidden, kPer, false);
      gpu_train::loss_grad_host(y.data(), label, g2.data(), kPer * kOut, 1.0F / kBatch);
      gpu_train::weight_grad_host(g2.data(), hid.data(), dw2[d].data(), kOut, kHidden, kPer);
      gpu_train::input_grad_host(h.w2.data(), g2.data(), hid.data(), dh.data(), kOut, kHidden, kPer);
      gpu_train::weight_grad_host(dh.data(), x, dw1[d].data(), kHidden, kIn, kPer);
    }
    for (std::size_t i = 0; i < h.w2.size(); ++i) h.w2[i] -= kLr * (dw2[0][i] + dw2[1][i]);
    for (std::size_t i = 0; i < h.w1.size(); ++i) h.w1[i] -= kLr * (dw1[0][i] + dw1[1][i]);
  }
}

int run(bool want_cuda, bool require_cuda) {
  using ordo::Context;
  using ordo::FnProperty;
  using ordo::Var;
  using ordo::gpu::Buffer;
  using ordo::gpu::Stream;

  const ordo::gpu::Probe probe = ordo::gpu::probe_cuda();
  Kernels* cuda = nullptr;
#ifdef ORDO_EXAMPLE_CUDA_KERNELS
  cuda = gpu_train::cuda_kernels();
#endif
  const bool use_cuda = want_cuda && probe.available() && cuda != nullptr;
  if (require_cuda && !use_cuda) {
    std::fprintf(stderr, "gpu_train: --cuda, but %s\n",
                 cuda == nullptr ? "the example was built without nvcc" : probe.reason.c_str());
    return 1;
  }

  ordo::Engine engine;
  ordo::gpu::Runtime rt(engine, use_cuda ? ordo::gpu::make_cuda_backend() : ordo::gpu::make_sim_backend({.devices = 2}),
                        {.devices = kDevices});  // two logical devices, even on one GPU
  HostKernels host_kernels;
  host_kernels.rt = &rt;
  Kernels& k = use_cuda ? *cuda : static_cast<Kernels&>(host_kernels);
  std::printf("gpu_train: backend %s, %d logical devices\n", rt.backend().name(), rt.device_count());

  Host h = make_problem();
  Host want = h;
  serial(want);

  // Host staging buffers from a pool of pinned memory (so copies overlap),
  // each carrying its variable (ordo/storage.hpp); device buffers per
  // device, and a variable for each.
  ordo::BufferPool staging(engine, {.allocator = rt.pinned_allocator()});
  auto host_buf = [&](const std::vector<float>& init) {
    ordo::Buffer b = staging.acquire(init.size() * sizeof(float)).wait();
    std::memcpy(b.data(), init.data(), init.size() * sizeof(float));
    return b;
  };
  ordo::Buffer X = host_buf(h.x), L = host_buf(h.label), W1 = host_buf(h.w1), W2 = host_buf(h.w2);
  ordo::Buffer dW1h[kDevices], dW2h[kDevices];
  const Var vX = X.var(), vL = L.var(), vW1 = W1.var(), vW2 = W2.var();
  Var vdW1h[kDevices], vdW2h[kDevices];
  struct Dev {
    Buffer x, label, w1, w2, hid, y, g2, dh, dw1, dw2;
    Var vx, vlabel, vw1, vw2, vhid, vy, vg2, vdh, vdw1, vdw2;
  } dev[kDevices];
  for (int d = 0; d < kDevices; ++d) {
    auto fl = [&](int n) { return rt.alloc_device(d, static_cast<std::size_t>(n) * sizeof(float)); };
    Dev& D = dev[d];
    D.x = fl(kPer * kIn), D.label = fl(kPer * kOut), D.w1 = fl(kHidden * kIn), D.w2 = fl(kOut * kHidden);
    D.hid = fl(kPer * kHidden), D.y = fl(kPer * kOut), D.g2 = fl(kPer * kOut), D.dh = fl(kPer * kHidden);
    D.dw1 = fl(kHidden * kIn), D.dw2 = fl(kOut * kHidden);
    for (Var* v : {&D.vx, &D.vlabel, &D.vw1, &D.vw2, &D.vhid, &D.vy, &D.vg2, &D.vdh, &D.vdw1, &D.vdw2}) {
      *v = engine.new_variable();
    }
    dW1h[d] = staging.acquire(kHidden * kIn * sizeof(float)).wait();
    dW2h[d] = staging.acquire(kOut * kHidden * sizeof(float)).wait();
    vdW1h[d] = dW1h[d].var();
    vdW2h[d] = dW2h[d].var();
  }
  const auto h2d = ordo::OpAttrs{.prop = FnProperty::copy_to_device};
  const auto d2h = ordo::OpAttrs{.prop = FnProperty::copy_from_device};

  // The initial weights and this example's one batch go to both devices.
  for (int d = 0; d < kDevices; ++d) {
    Dev& D = dev[d];
    const Context g = Context::gpu(d);
    rt.push([&, d](const Stream& s) { s.copy(D.x.data(), X.as<float>() + d * kPer * kIn, D.x.size()); }, g, {vX},
            {D.vx}, h2d);
    rt.push([&, d](const Stream& s) { s.copy(D.label.data(), L.as<float>() + d * kPer * kOut, D.label.size()); }, g,
            {vL}, {D.vlabel}, h2d);
    rt.push([&](const Stream& s) { s.copy(D.w1.data(), W1.data(), D.w1.size()); }, g, {vW1}, {D.vw1}, h2d);
    rt.push([&](const Stream& s) { s.copy(D.w2.data(), W2.data(), D.w2.size()); }, g, {vW2}, {D.vw2}, h2d);
  }

  for (int step = 0; step < kSteps; ++step) {
    for (int d = 0; d < kDevices; ++d) {
      Dev& D = dev[d];
      const Context g = Context::gpu(d);
      auto f = [](const Buffer& b) { return b.as<float>(); };
      rt.push([&](const Stream& s) { k.forward(s.handle(), f(D.w1), f(D.x), f(D.hid), kHidden, kIn, kPer, true); }, g,
              {D.vw1, D.vx}, {D.vhid}, {.name = "fc1 forward"});
      rt.push([&](const Stream& s) { k.forward(s.handle(), f(D.w2), f(D.hid), f(D.y), kOut, kHidden, kPer, false); },
              g, {D.vw2, D.vhid}, {D.vy}, {.name = "fc2 forward"});
      rt.push([&](const Stream& s) { k.loss_grad(s.handle(), f(D.y), f(D.label), f(D.g2), kPer * kOut, 1.0F / kBatch); },
              g, {D.vy, D.vlabel}, {D.vg2}, {.name = "loss grad"});
      rt.push([&](const Stream& s) { k.weight_grad(s.handle(), f(D.g2), f(D.hid), f(D.dw2), kOut, kHidden, kPer); }, g,
              {D.vg2, D.vhid}, {D.vdw2}, {.name = "fc2 wgrad"});
      // fc2's gradient leaves for the host now, while fc1's backward runs.
      rt.push([&, d](const Stream& s) { s.copy(dW2h[d].data(), D.dw2.data(), D.dw2.size()); }, g, {D.vdw2},
              {vdW2h[d]}, d2h);
      rt.push([&](const Stream& s) { k.input_grad(s.handle(), f(D.w2), f(D.g2), f(D.hid), f(D.dh), kOut, kHidden, kPer); },
              g, {D.vw2, D.vg2, D.vhid}, {D.vdh}, {.name = "fc1 ograd"});
      rt.push([&](const Stream& s) { k.weight_grad(s.handle(), f(D.dh), f(D.x), f(D.dw1), kHidden, kIn, kPer); }, g,
              {D.vdh, D.vx}, {D.vdw1}, {.name = "fc1 wgrad"});
      rt.push([&, d](const Stream& s) { s.copy(dW1h[d].data(), D.dw1.data(), D.dw1.size()); }, g, {D.vdw1},
              {vdW1h[d]}, d2h);
    }
    // Aggregate and update on the CPU (held until the copies finished), then
    // copy each layer back as soon as it is updated.
    auto update = [&](ordo::Buffer& w, ordo::Buffer* grads, std::size_t n) {
      float* pw = w.as<float>();
      const float* g0 = grads[0].as<float>();
      const float* g1 = grads[1].as<float>();
      for (std::size_t i = 0; i < n; ++i) pw[i] -= kLr * (g0[i] + g1[i]);
    };
    engine.push_sync([&] { update(W2, dW2h, h.w2.size()); }, Context::cpu(), {vdW2h[0], vdW2h[1]}, {vW2},
                     {.prop = FnProperty::cpu_prioritized, .name = "fc2 update"});
    engine.push_sync([&] { update(W1, dW1h, h.w1.size()); }, Context::cpu(), {vdW1h[0], vdW1h[1]}, {vW1},
                     {.prop = FnProperty::cpu_prioritized, .name = "fc1 update"});
    for (int d = 0; d < kDevices; ++d) {
      Dev& D = dev[d];
      rt.push([&](const Stream& s) { s.copy(D.w2.data(), W2.data(), D.w2.size()); }, Context::gpu(d), {vW2}, {D.vw2},
              h2d);
      rt.push([&](const Stream& s) { s.copy(D.w1.data(), W1.data(), D.w1.size()); }, Context::gpu(d), {vW1}, {D.vw1},
              h2d);
    }
  }
  engine.wait_for_var(vW1);
  engine.wait_for_var(vW2);
  engine.wait_for_all();

  // Bit-identical on the simulated backend (same loops); CUDA's float
  // arithmetic (fused multiply-add) may differ in the last bits.
  double worst = 0.0;
  auto compare = [&](const ordo::Buffer& got, const std::vector<float>& ref) {
    for (std::size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(got.as<float>()[i] - ref[i])));
    }
  };
  compare(W1, want.w1);
  compare(W2, want.w2);
  const ordo::gpu::RuntimeStats st = rt.stats();
  std::printf("gpu_train: %d steps, %llu GPU ops, %llu cross-stream waits on the device, %llu ops held for the GPU\n",
              kSteps, static_cast<unsigned long long>(st.gpu_ops), static_cast<unsigned long long>(st.stream_waits),
              static_cast<unsigned long long>(st.held_ops));
  const double tolerance = use_cuda ? 1e-4 : 0.0;
  std::printf("gpu_train: largest difference from the serial computation: %g (tolerance %g)\n", worst, tolerance);
  // The staging buffers go back to their pool behind their last ops, and
  // the pool before the runtime that gave it its pinned memory.
  for (ordo::Buffer* b : {&X, &L, &W1, &W2}) b->release();
  for (int d = 0; d < kDevices; ++d) {
    dW1h[d].release();
    dW2h[d].release();
  }
  engine.wait_for_all();
  const ordo::BufferPoolStats ps = staging.stats();
  std::printf("gpu_train: %llu pinned staging buffers from the pool, %zu KiB held, %zu KiB in use\n",
              static_cast<unsigned long long>(ps.acquires), ps.reserved_bytes / 1024, ps.in_use_bytes / 1024);
  for (int d = 0; d < kDevices; ++d) {
    for (Buffer b : {dev[d].x, dev[d].label, dev[d].w1, dev[d].w2, dev[d].hid, dev[d].y, dev[d].g2, dev[d].dh,
                     dev[d].dw1, dev[d].dw2}) {
      rt.free(b);
    }
  }
  if (worst > tolerance) {
    std::fprintf(stderr, "gpu_train: FAILED: weights differ from the serial computation\n");
    return 1;
  }
  std::printf("gpu_train: OK\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!mode.empty() && mode != "--sim" && mode != "--cuda") {
    std::fprintf(stderr, "usage: gpu_train [--sim | --cuda]\n");
    return 2;
  }
  try {
    return run(mode != "--sim", mode == "--cuda");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_train: %s\n", e.what());
    return 1;
  }
}
