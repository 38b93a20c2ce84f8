// gpu/stream.cpp - Stream (a handle on a runtime's stream), the ways to
// learn that a stream's work finished without blocking a worker
// (complete_when_done, co_await gpu::on), and Runtime::stream.
#include <coroutine>
#include <cstdint>
#include <exception>
#include <utility>

#include "runtime_impl.hpp"
#include "ordo/detail/coro_runtime.hpp"

namespace ordo::gpu {

// ------------------------------------------------------------------ Stream

void* Stream::handle() const noexcept { return st_->handle; }
int Stream::device() const noexcept { return st_->logical; }
int Stream::physical_device() const noexcept { return st_->phys; }
void Stream::host_task(HostFn fn) const {
  Runtime::Impl& m = *rt_->impl_;
  StreamState* st = st_;
  if (st->capturing != nullptr) [[unlikely]] {
    m.captured_host_task(st, std::move(fn));
    return;
  }
  m.enqueue_host(st, [&m, st, fn = std::move(fn)](std::uint64_t k) { m.run_host(st, k, fn); });
}
void Stream::copy(void* dst, const void* src, std::size_t bytes) const {
  Runtime::Impl& m = *rt_->impl_;
  m.backend->copy(dst, src, bytes, st_->handle);
  if (m.prof != nullptr) [[unlikely]] Runtime::Impl::note_copy(bytes);
}

Stream Runtime::stream(Context ctx, FnProperty prop, unsigned index) {
  impl_->check_device(ctx);
  return Stream(this, impl_->pick(ctx.device_id, prop, static_cast<int>(index % 1024U)));
}

void Runtime::complete_when_done(const Stream& s, OnComplete done) {
  Impl& m = *impl_;
  Event* ev = m.acquire(s.st_->phys);
  try {
    m.record_on(s.st_, ev);
  } catch (...) {
    m.unref(ev);
    throw;
  }
  Impl::Pending p;
  p.events.push_back(ev);
  p.then = [&m, done](std::exception_ptr e) {
    m.observe(e);  // the async op's error from here on
    done(std::move(e));
  };
  m.watch(std::move(p));
}

// ------------------------------------------------------------------ StreamAwaitable

StreamAwaitable::~StreamAwaitable() {
  if (ev_ != nullptr) s_.rt_->impl_->unref(ev_);
}

bool StreamAwaitable::await_ready() {
  Runtime::Impl& m = *s_.rt_->impl_;
  try {
    m.backend->after_body();  // a launch the coroutine made before this await failed: rethrown at once
  } catch (...) {
    error_ = std::current_exception();
    return true;
  }
  ev_ = m.acquire(s_.st_->phys);
  m.record_on(s_.st_, ev_);
  const int st = m.status(ev_);
  if (st == 2) {
    error_ = ev_->error;
    m.observe(error_);
  }
  return st != 0;
}

void StreamAwaitable::await_suspend(std::coroutine_handle<> h) {
  Runtime::Impl& m = *s_.rt_->impl_;
  Runtime::Impl::Pending p;
  p.events.push_back(Runtime::Impl::ref(ev_));
  Engine* engine = &m.engine;
  const Context ctx = m.opts.resume_ctx;
  StreamAwaitable* self = this;
  p.then = [&m, self, h, engine, ctx](std::exception_ptr e) {
    m.observe(e);
    self->error_ = std::move(e);
    try {
      engine->post([h] { ordo::detail::resume(h); }, ctx, {.name = "ordo::gpu resume"});
    } catch (...) {
      ordo::detail::resume(h);  // out of memory for the post: resuming here is the only way not to lose it
    }
  };
  m.watch(std::move(p));
}

}  // namespace ordo::gpu
