// examples/gpu_train_kernels.hpp - the four "kernels" of gpu_train: a host
// version (enqueued as host tasks: the simulated backend) and, when built with
// nvcc, a CUDA version (gpu_train_kernels.cu). Row-major float matrices.
#pragma once

#include <cstddef>

namespace gpu_train {

struct Kernels {
  virtual ~Kernels() = default;
  /// out[b][r] = act(sum_k w[r][k] * x[b][k]); act = relu or identity.
  virtual void forward(void* stream, const float* w, const float* x, float* out, int rows, int in, int batch,
                       bool relu) = 0;
  /// g[i] = (y[i] - label[i]) * scale
  virtual void loss_grad(void* stream, const float* y, const float* label, float* g, int n, float scale) = 0;
  /// dw[r][c] = sum_b g[b][r] * a[b][c]
  virtual void weight_grad(void* stream, const float* g, const float* a, float* dw, int rows, int cols,
                           int batch) = 0;
  /// dh[b][c] = (sum_r w[r][c] * g[b][r]) * (h[b][c] > 0)
  virtual void input_grad(void* stream, const float* w, const float* g, const float* h, float* dh, int rows,
                          int cols, int batch) = 0;
};

/// The loops, shared by the host kernels and the serial reference.
inline void forward_host(const float* w, const float* x, float* out, int rows, int in, int batch, bool relu) {
  for (int b = 0; b < batch; ++b) {
    for (int r = 0; r < rows; ++r) {
      float s = 0.0F;
      for (int k = 0; k < in; ++k) s += w[r * in + k] * x[b * in + k];
      out[b * rows + r] = relu && s < 0.0F ? 0.0F : s;
    }
  }
}
inline void loss_grad_host(const float* y, const float* label, float* g, int n, float scale) {
  for (int i = 0; i < n; ++i) g[i] = (y[i] - label[i]) * scale;
}
inline void weight_grad_host(const float* g, const float* a, float* dw, int rows, int cols, int batch) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      float s = 0.0F;
      for (int b = 0; b < batch; ++b) s += g[b * rows + r] * a[b * cols + c];
      dw[r * cols + c] = s;
    }
  }
}
inline void input_grad_host(const float* w, const float* g, const float* h, float* dh, int rows, int cols,
                            int batch) {
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < cols; ++c) {
      float s = 0.0F;
      for (int r = 0; r < rows; ++r) s += w[r * cols + c] * g[b * rows + r];
      dh[b * cols + c] = h[b * cols + c] > 0.0F ? s : 0.0F;
    }
  }
}

/// CUDA kernels (gpu_train_kernels.cu), when the example was built with nvcc.
Kernels* cuda_kernels();

}  // namespace gpu_train
