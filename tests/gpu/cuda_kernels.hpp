// tests/gpu/cuda_kernels.hpp - real CUDA kernels for the gpu tests (compiled
// by nvcc from cuda_kernels.cu, linked in when the toolkit has nvcc; the test
// sources see no CUDA header: streams are passed as the backend's handle).
#pragma once

#include <cstdint>

namespace ordo::test::kernels {

/// Whether these kernels were compiled in (nvcc found at configure time).
bool compiled() noexcept;

/// x[i] = x[i] * a + b (+ src[i] when src is not null), all mod 2^32 so that a
/// host reference is bit-exact; every thread first spins about `spin_ns`, so
/// that a consumer on another stream that did not wait would read old data.
void affine(void* stream, std::uint32_t* x, const std::uint32_t* src, int n, std::uint32_t a, std::uint32_t b,
            std::uint32_t spin_ns);

/// Fills x[0..n) with v after spinning `spin_ns`.
void fill(void* stream, std::uint32_t* x, int n, std::uint32_t v, std::uint32_t spin_ns);

/// A launch that CUDA refuses (2048 threads per block). Nothing is enqueued.
void bad_launch(void* stream);
/// The error name this CUDA reports for bad_launch (cudaErrorInvalidValue on
/// CUDA 13, cudaErrorInvalidConfiguration on older ones), found by making
/// the launch on the calling thread and taking its error back.
const char* bad_launch_error_name();

/// A kernel that writes through an invalid device address: the context
/// fails (cudaErrorIllegalAddress, sticky for the whole process).
void fault(void* stream);

}  // namespace ordo::test::kernels
