// ordo/detail/profile_hooks.hpp - how a layer (ordo::io, ordo::gpu,
// ordo::dist) draws its own work in the engine's trace: a slice from begin
// to end on a track of its own, an arrow from the op that began it, and
// arrows to the ops its completion pushed or finished. Internal; not for
// user code. Called only with a profiler (EngineExtension::profiler is not
// null): a layer pays one predictable branch per request when profiling is off.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace ordo {
class HeldOp;  // ordo/fence.hpp
}  // namespace ordo

namespace ordo::detail {

class ProfilerCore;

/// What a slice is: the trace's process it is drawn in (docs/profiler.md).
enum class SliceCategory : std::uint8_t {
  io = 1,        ///< an ordo::io request, submission to delivery; track: the backend
  gpu = 2,       ///< a GPU kernel or copy; track: device and stream
  transfer = 3,  ///< an ordo::dist send or receive; track: this rank's transfers
};

/// Begins a slice named `name` (a string that lives as long as the engine:
/// interned by address) on `track` (the same), moving `bytes`; `peer`,
/// `key` and `var` tie a transfer to its other end (-1, 0, 0 otherwise). The op whose body runs on
/// this thread, if any, is recorded as the one that began it. Returns the
/// slice's id, 0 if it was not recorded (out of memory, events dropped).
std::uint64_t profile_slice_begin(ProfilerCore* p, SliceCategory category, const char* name, const char* track,
                                  std::uint64_t bytes, std::int32_t peer = -1, std::uint64_t key = 0,
                                  std::uint64_t var = 0) noexcept;
/// Ends slice `slice` (0: nothing) with `result` (bytes, an fd, or -errno).
void profile_slice_end(ProfilerCore* p, std::uint64_t slice, std::int64_t result) noexcept;
/// Ends slice `slice` with times taken where the work ran (a GPU stream's
/// events, on steady_clock) rather than at the calls: drawn from `begin`
/// to `end`, having moved `bytes` (replacing those given at its begin).
void profile_slice_end_at(ProfilerCore* p, std::uint64_t slice, std::chrono::steady_clock::time_point begin,
                          std::chrono::steady_clock::time_point end, std::uint64_t bytes,
                          std::int64_t result) noexcept;
/// Slice `slice` could not begin before slice `before` ended: a GPU op's
/// stream waited for the events of earlier GPU work on its variables
/// (`same_stream` false: an arrow between the two), or ran it first
/// (true: stream order, not drawn). The critical path follows both.
void profile_slice_after(ProfilerCore* p, std::uint64_t slice, std::uint64_t before, bool same_stream) noexcept;
/// The engine's FenceGate held `op` until slice `slice` ended, and releases
/// it now (ordo/fence.hpp): an arrow from the slice to the op.
void profile_fence_release(ProfilerCore* p, std::uint64_t slice, const HeldOp& op) noexcept;
/// From now until profile_release_end() on this thread, the ops this thread
/// pushes (a coroutine's resumption, a callback) or finishes (an async op's
/// OnComplete) were released by `slice`: the trace draws an arrow to each.
void profile_release_begin(ProfilerCore* p, std::uint64_t slice) noexcept;
void profile_release_end(ProfilerCore* p) noexcept;

/// profile_release_begin / _end for a scope; nothing with a null profiler
/// or slice 0 (profiling off: one predictable branch).
class ProfileReleaseScope {
 public:
  ProfileReleaseScope(ProfilerCore* p, std::uint64_t slice) noexcept : p_(slice != 0 ? p : nullptr) {
    if (p_ != nullptr) [[unlikely]] profile_release_begin(p_, slice);
  }
  ~ProfileReleaseScope() {
    if (p_ != nullptr) [[unlikely]] profile_release_end(p_);
  }
  ProfileReleaseScope(const ProfileReleaseScope&) = delete;
  ProfileReleaseScope& operator=(const ProfileReleaseScope&) = delete;

 private:
  ProfilerCore* p_;
};

}  // namespace ordo::detail
