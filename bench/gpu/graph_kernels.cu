// bench/gpu/graph_kernels.cu - the tiny kernel of ordo_gpu_graph_bench's
// step, for the CUDA backend (built where nvcc is).
#include <cuda_runtime.h>

namespace ordo::bench {
namespace {
__global__ void tiny(float* x) {
  if (threadIdx.x == 0) x[0] += 1.0F;
}
}  // namespace

void launch_tiny(void* stream, float* x) { tiny<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(x); }

}  // namespace ordo::bench
