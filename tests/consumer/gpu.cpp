// A program outside the ordo tree, built against an installed ordo (target
// ordo::gpu): the CUDA probe (linking the CUDA runtime where ordo::gpu was
// built with it; it needs no device) and a GPU op on the simulated stream
// backend, which every build has, ordered before a CPU op that reads its result.
#include <ordo/gpu.hpp>
#include <ordo/ordo.hpp>

#include <cstdio>

int main() {
  const ordo::gpu::Probe probe = ordo::gpu::probe_cuda();
  std::printf("consumer_gpu: CUDA backend compiled: %s, devices: %d%s%s\n",
              ordo::gpu::cuda_compiled() ? "yes" : "no", probe.devices, probe.reason.empty() ? "" : ": ",
              probe.reason.c_str());
  ordo::Engine engine;
  int on_device = 0;
  int seen = 0;
  {
    ordo::gpu::Runtime gpu(engine, ordo::gpu::make_sim_backend());
    ordo::Var x = engine.new_variable();
    gpu.push([&on_device](const ordo::gpu::Stream& s) { s.host_task([&on_device] { on_device = 42; }); },
             ordo::Context::gpu(0), {}, {x});
    engine.push_sync([&] { seen = on_device; }, ordo::Context::cpu(), {x}, {});
    engine.wait_for_all();
  }
  return seen == 42 ? 0 : 1;
}
