// examples/gpu_train_kernels.cu - gpu_train's kernels for a real GPU: one
// thread per output element, the same loops as the host version.
#include <cuda_runtime.h>

#include <string>

#include "gpu_train_kernels.hpp"
#include "ordo/gpu/backend.hpp"

namespace gpu_train {
namespace {

__global__ void forward_k(const float* w, const float* x, float* out, int rows, int in, int batch, bool relu) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * batch) return;
  const int b = i / rows, r = i % rows;
  float s = 0.0F;
  for (int k = 0; k < in; ++k) s += w[r * in + k] * x[b * in + k];
  out[i] = relu && s < 0.0F ? 0.0F : s;
}
__global__ void loss_grad_k(const float* y, const float* label, float* g, int n, float scale) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) g[i] = (y[i] - label[i]) * scale;
}
__global__ void weight_grad_k(const float* g, const float* a, float* dw, int rows, int cols, int batch) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int r = i / cols, c = i % cols;
  float s = 0.0F;
  for (int b = 0; b < batch; ++b) s += g[b * rows + r] * a[b * cols + c];
  dw[i] = s;
}
__global__ void input_grad_k(const float* w, const float* g, const float* h, float* dh, int rows, int cols,
                             int batch) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= cols * batch) return;
  const int b = i / cols, c = i % cols;
  float s = 0.0F;
  for (int r = 0; r < rows; ++r) s += w[r * cols + c] * g[b * rows + r];
  dh[i] = h[i] > 0.0F ? s : 0.0F;
}

int blocks(int n) { return (n + 127) / 128; }

/// A launch error (bad configuration) is reported at once; faults during the
/// kernel show up later on the stream's events.
void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw ordo::gpu::GpuError(static_cast<int>(e), cudaGetErrorName(e), std::string("launch of ") + kernel);
}

struct CudaKernels final : Kernels {
  void forward(void* s, const float* w, const float* x, float* out, int rows, int in, int batch, bool relu) override {
    forward_k<<<blocks(rows * batch), 128, 0, static_cast<cudaStream_t>(s)>>>(w, x, out, rows, in, batch, relu);
    check_launch("forward_k");
  }
  void loss_grad(void* s, const float* y, const float* label, float* g, int n, float scale) override {
    loss_grad_k<<<blocks(n), 128, 0, static_cast<cudaStream_t>(s)>>>(y, label, g, n, scale);
    check_launch("loss_grad_k");
  }
  void weight_grad(void* s, const float* g, const float* a, float* dw, int rows, int cols, int batch) override {
    weight_grad_k<<<blocks(rows * cols), 128, 0, static_cast<cudaStream_t>(s)>>>(g, a, dw, rows, cols, batch);
    check_launch("weight_grad_k");
  }
  void input_grad(void* s, const float* w, const float* g, const float* h, float* dh, int rows, int cols,
                  int batch) override {
    input_grad_k<<<blocks(cols * batch), 128, 0, static_cast<cudaStream_t>(s)>>>(w, g, h, dh, rows, cols, batch);
    check_launch("input_grad_k");
  }
};

}  // namespace

Kernels* cuda_kernels() {
  static CudaKernels k;
  return &k;
}

}  // namespace gpu_train
