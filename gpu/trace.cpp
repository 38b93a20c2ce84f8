// gpu/trace.cpp - GPU ops' work in the engine's trace (docs/profiler.md):
// one slice per op on its stream's track, timed by an event recorded before
// its work and the event that ends it, with arrows from the op, from the
// work its stream waited for, and to the ops its fence held. Called only
// with the profiler on: the gpu path pays a branch per op when it is off.
#include <cstdint>
#include <exception>
#include <utility>
#include <vector>

#include "runtime_impl.hpp"

namespace ordo::gpu {

namespace {

using ordo::detail::profile_fence_release;
using ordo::detail::profile_slice_after;
using ordo::detail::profile_slice_begin;
using ordo::detail::profile_slice_end;
using ordo::detail::profile_slice_end_at;
using ordo::detail::SliceCategory;

/// The slice of the GPU op whose body runs on this thread (Stream::copy counts its bytes).
thread_local OpSlice* t_slice = nullptr;

/// A slice's result: 0, or minus the code of the failure (-1 without one).
std::int64_t result_of(const std::exception_ptr& error) noexcept {
  if (!error) return 0;
  try {
    std::rethrow_exception(error);
  } catch (const GpuError& e) {
    return e.code() > 0 ? -static_cast<std::int64_t>(e.code()) : -1;
  } catch (...) {
    return -1;
  }
}

}  // namespace

void Runtime::Impl::begin_slice(StreamState* s, const OpPlan& plan, const std::vector<Event*>& waits,
                                OpSlice& slice) noexcept {
  const StreamTrace& tr = *s->trace;
  slice.id = profile_slice_begin(prof, SliceCategory::gpu, plan.name != nullptr ? plan.name : tr.work,
                                 tr.track.c_str(), 0);
  if (slice.id == 0) return;  // not recorded (the profiler's memory bound)
  try {
    slice.start = acquire(s->phys);
    record_on(s, slice.start);
  } catch (...) {
    if (slice.start != nullptr) unref(slice.start);
    slice.start = nullptr;
    profile_slice_end(prof, slice.id, -1);
    slice.id = 0;
    return;
  }
  for (const Event* e : waits) profile_slice_after(prof, slice.id, e->slice, false);
  profile_slice_after(prof, slice.id, s->trace->last_slice.exchange(slice.id, std::memory_order_relaxed), true);
  slice.outer = std::exchange(t_slice, &slice);
}

void Runtime::Impl::note_copy(std::size_t bytes) noexcept {
  if (t_slice != nullptr) t_slice->bytes += bytes;
}

void Runtime::Impl::end_slice(OpSlice& slice, Event* end) noexcept {
  t_slice = slice.outer;
  Pending p;
  bool timed = end != nullptr;
  if (timed) {
    try {
      p.events.reserve(2);
    } catch (...) {
      timed = false;
    }
  }
  if (!timed) {
    // No end event to time it by (or no memory to watch it): ends now, failed.
    unref(slice.start);
    profile_slice_end(prof, slice.id, -1);
    return;
  }
  p.events.push_back(slice.start);  // its reference moves here
  p.events.push_back(ref(end));
  p.slice = slice.id;
  p.bytes = slice.bytes;
  watch(std::move(p));
}

void Runtime::Impl::trace_finished(const Pending& p) noexcept {
  if (p.slice != 0) {
    try {
      const Event& start = *p.events[0];
      const Event& end = *p.events[1];
      profile_slice_end_at(prof, p.slice, backend->completed_at(start.phys, start.handle),
                           backend->completed_at(end.phys, end.handle), p.bytes, result_of(p.error));
    } catch (...) {
      profile_slice_end(prof, p.slice, -1);  // the backend cannot time it: ends now, failed
    }
    return;
  }
  if (p.held.empty()) return;
  for (const Event* e : p.events) {
    if (e->slice != 0) profile_fence_release(prof, e->slice, p.held);
  }
}

}  // namespace ordo::gpu
