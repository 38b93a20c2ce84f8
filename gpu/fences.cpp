// gpu/fences.cpp - fences on variables, both sides: a GPU op makes its
// stream wait for the events of its variables and leaves its own event as
// their fence; the FenceGate holds any other op until those events finished.
#include <algorithm>
#include <exception>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime_impl.hpp"

namespace ordo::gpu {

void detail::PlanDeleter::operator()(OpPlan* p) const noexcept { delete p; }

// ------------------------------------------------------------------ a GPU op's plan

detail::PlanPtr Runtime::make_plan(Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs) {
  impl_->check_device(ctx);
  detail::PlanPtr plan(new OpPlan);
  fill_plan(*plan, reads, writes, attrs);
  return plan;
}

void Runtime::fill_plan(OpPlan& plan, VarSpan reads, VarSpan writes, const OpAttrs& attrs) {
  plan.prop = attrs.prop;
  plan.name = attrs.name;
  plan.access.clear();
  plan.access.reserve(reads.size() + writes.size());
  for (const Var& v : writes) plan.access.push_back({&engine_.fence_slot(v), true});
  for (const Var& v : reads) plan.access.push_back({&engine_.fence_slot(v), false});
  plan.normalize();
}

void OpPlan::normalize() {
  auto& a = access;
  std::sort(a.begin(), a.end(), [](const Access& x, const Access& y) {
    return x.slot != y.slot ? std::less<>{}(x.slot, y.slot) : x.write > y.write;  // a write first
  });
  a.erase(std::unique(a.begin(), a.end(), [](const Access& x, const Access& y) { return x.slot == y.slot; }), a.end());
}

// ------------------------------------------------------------------ a GPU op's waits and fence

void Runtime::Impl::wait_fences(StreamState* s, const OpPlan& plan, std::vector<Event*>& waits) {
  {
    std::lock_guard lock(fence_mutex);
    auto want = [&](Event* e) {
      if (e->stream != s && status_cached(e) != 1) waits.push_back(ref(e));
    };
    for (const auto& a : plan.access) {
      Fence* f = fence_of(a.slot);
      if (f == nullptr) continue;
      if (f->writer != nullptr) want(f->writer);
      if (a.write) {
        for (Event* e : f->readers) want(e);
      }
    }
  }
  if (opts.unsafe_skip_stream_waits) return;
  for (Event* e : waits) {
    backend->wait(s->handle, e->handle);  // cudaStreamWaitEvent: ordered on the device, no host round trip
    n_waits.fetch_add(1, std::memory_order_relaxed);
    propagate_host_failure(s, *e);        // only after host tasks on e's stream
  }
}

Stream Runtime::begin_op(const RunContext& rc, const OpPlan& plan, OpSlice& slice, std::exception_ptr& error) noexcept {
  Impl& m = *impl_;
  StreamState* s = m.pick(rc.ctx.device_id, plan.prop, rc.worker);
  m.n_ops.fetch_add(1, std::memory_order_relaxed);
  std::vector<Event*> waits;
  try {
    m.backend->before_body(s->phys);
    m.wait_fences(s, plan, waits);
  } catch (...) {
    error = std::current_exception();
  }
  if (m.prof != nullptr && !error) [[unlikely]] m.begin_slice(s, plan, waits, slice);
  for (Event* e : waits) m.unref(e);
  return Stream(this, s);
}

void Runtime::end_op(const Stream& s, const OpPlan& plan, OpSlice& slice, std::exception_ptr& error) noexcept {
  Impl& m = *impl_;
  // A launch that failed enqueued nothing; what else the body enqueued is
  // fenced as usual below, and the op fails with the launch's error.
  try {
    m.backend->after_body();
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  Event* ev = nullptr;
  Event* recorded = nullptr;
  try {
    ev = m.acquire(s.st_->phys);
    m.record_on(s.st_, ev);
    recorded = ev;
    ev->slice = slice.id;  // before the fence shares it
    std::lock_guard lock(m.fence_mutex);
    for (const auto& a : plan.access) {
      Fence* f = Impl::fence_of(a.slot);
      if (f == nullptr) {
        f = new Fence;
        m.fenced.insert(a.slot);
        a.slot->store(f, std::memory_order_relaxed);
      }
      if (a.write) {
        // This op's stream waited for every earlier fence of the variable:
        // its event stands for all of them.
        if (f->writer != nullptr) m.unref(f->writer);
        for (Event* e : f->readers) m.unref(e);
        f->readers.clear();
        f->writer = Impl::ref(ev);
      } else {
        std::erase_if(f->readers, [&](Event* e) {
          if (Impl::status_cached(e) != 1) return false;
          m.unref(e);
          return true;
        });
        f->readers.push_back(Impl::ref(ev));
      }
    }
  } catch (...) {
    // The work may be enqueued without a fence: wait for it here rather than
    // let a CPU consumer read unfinished results.
    if (!error) error = std::current_exception();
    try {
      m.backend->synchronize_stream(s.st_->handle);
    } catch (...) {
    }
  }
  if (slice.id != 0) [[unlikely]] m.end_slice(slice, recorded);
  if (ev != nullptr) m.unref(ev);
}

// ------------------------------------------------------------------ the FenceGate

void Runtime::Impl::prune(FenceSlot* slot, Fence* f, bool query) noexcept {
  auto finished = [&](Event* e) { return (query ? status(e) : status_cached(e)) == 1; };
  if (f->writer != nullptr && finished(f->writer)) {
    unref(f->writer);
    f->writer = nullptr;
  }
  std::erase_if(f->readers, [&](Event* e) {
    if (!finished(e)) return false;
    unref(e);
    return true;
  });
  if (f->writer == nullptr && f->readers.empty()) drop(slot, f);
}

void Runtime::Impl::drop(FenceSlot* slot, Fence* f) noexcept {
  if (f->writer != nullptr) unref(f->writer);
  for (Event* e : f->readers) unref(e);
  delete f;
  // release: an op that finds the slot null runs at once on whatever thread
  // dispatches it (the engine loads it with acquire); this thread has seen
  // the work behind the fence finish, and that must reach the op.
  slot->store(nullptr, std::memory_order_release);
  fenced.erase(slot);
}

bool Runtime::Impl::hold(HeldOp op) noexcept {
  std::vector<Event*> waits;
  try {
    std::lock_guard lock(fence_mutex);
    for (std::size_t i = 0; i < op.size(); ++i) {
      FenceSlot* slot = &op.slot(i);
      Fence* f = fence_of(slot);
      if (f == nullptr) continue;
      prune(slot, f, /*query=*/true);
      if ((f = fence_of(slot)) == nullptr) continue;
      if (f->writer != nullptr) waits.push_back(ref(f->writer));
      if (op.writes(i)) {
        for (Event* e : f->readers) waits.push_back(ref(e));
      }
    }
  } catch (...) {
    // Out of memory building the list: hold on to what is known and let
    // the watcher release it (it then waits for everything referenced).
  }
  if (waits.empty()) return false;
  n_held.fetch_add(1, std::memory_order_relaxed);
  Pending p;
  p.events = std::move(waits);
  p.held = op;
  watch(std::move(p));
  return true;
}

void Runtime::Impl::release_held(const HeldOp& op, std::exception_ptr error) noexcept {
  {
    std::lock_guard lock(fence_mutex);
    for (std::size_t i = 0; i < op.size(); ++i) {
      FenceSlot* slot = &op.slot(i);
      Fence* f = fence_of(slot);
      if (f == nullptr) continue;
      if (op.writes(i)) {
        drop(slot, f);
      } else {
        prune(slot, f, /*query=*/false);
      }
    }
  }
  observe(error);  // the engine owns it now (the op's error, then its outputs')
  try {
    op.release(std::move(error));
  } catch (...) {
    // release() only allocates the error record; nothing else can fail.
  }
}

}  // namespace ordo::gpu
