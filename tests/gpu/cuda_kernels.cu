// tests/gpu/cuda_kernels.cu - the kernels of cuda_kernels.hpp.
#include <cuda_runtime.h>

#include "gpu/cuda_kernels.hpp"

namespace ordo::test::kernels {
namespace {

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));  // the GPU's nanosecond timer
  return t;
}

__device__ void spin(std::uint32_t ns) {
  if (ns == 0) return;
  const unsigned long long start = now_ns();
  while (now_ns() - start < ns) {
  }
}

__global__ void affine_kernel(std::uint32_t* x, const std::uint32_t* src, int n, std::uint32_t a, std::uint32_t b,
                              std::uint32_t spin_ns) {
  spin(spin_ns);
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] = x[i] * a + b + (src != nullptr ? src[i] : 0U);
}

__global__ void fill_kernel(std::uint32_t* x, int n, std::uint32_t v, std::uint32_t spin_ns) {
  spin(spin_ns);
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] = v;
}

__global__ void fault_kernel(std::uint32_t* bad) { bad[threadIdx.x] = 1U; }

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
unsigned blocks(int n) { return static_cast<unsigned>((n + 255) / 256); }

}  // namespace

bool compiled() noexcept { return true; }

void affine(void* stream, std::uint32_t* x, const std::uint32_t* src, int n, std::uint32_t a, std::uint32_t b,
            std::uint32_t spin_ns) {
  affine_kernel<<<blocks(n), 256, 0, as_stream(stream)>>>(x, src, n, a, b, spin_ns);
}

void fill(void* stream, std::uint32_t* x, int n, std::uint32_t v, std::uint32_t spin_ns) {
  fill_kernel<<<blocks(n), 256, 0, as_stream(stream)>>>(x, n, v, spin_ns);
}

void bad_launch(void* stream) { fill_kernel<<<1, 2048, 0, as_stream(stream)>>>(nullptr, 0, 0U, 0U); }

const char* bad_launch_error_name() {
  (void)cudaGetLastError();
  bad_launch(nullptr);
  return cudaGetErrorName(cudaGetLastError());
}

void fault(void* stream) {
  // An address no allocation has: the write faults on the device.
  fault_kernel<<<1, 32, 0, as_stream(stream)>>>(reinterpret_cast<std::uint32_t*>(0x10));
}

}  // namespace ordo::test::kernels
