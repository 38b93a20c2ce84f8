// gpu/events.cpp - the runtime's pooled events and the failures they carry:
// a failed event, a host task that threw (which fails its stream, as a device
// fault would), and the registry that reports each failure to one consumer.
#include <exception>
#include <memory>
#include <mutex>
#include <utility>

#include "runtime_impl.hpp"

namespace ordo::gpu {

// ------------------------------------------------------------------ events

Event* Runtime::Impl::acquire(int phys) {
  {
    std::lock_guard lock(pool_mutex);
    if (Event* e = free_events[phys]; e != nullptr) {
      free_events[phys] = e->next_free;
      e->next_free = nullptr;
      e->refs.store(1, std::memory_order_relaxed);
      e->state.store(0, std::memory_order_relaxed);
      e->error = nullptr;
      e->stream = nullptr;
      e->host_count = 0;
      e->slice = 0;
      return e;
    }
  }
  auto ev = std::make_unique<Event>();
  ev->handle = backend->create_event(phys, opts.watch == WatchMode::blocking_sync, prof != nullptr);
  ev->phys = phys;
  ev->refs.store(1, std::memory_order_relaxed);
  n_events.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(pool_mutex);
  all_events.push_back(std::move(ev));
  return all_events.back().get();
}

int Runtime::Impl::status(Event* e) noexcept {
  int s = e->state.load(std::memory_order_acquire);
  if (s == 1 || s == 2) return s;
  if (s == 3) {
    while ((s = e->state.load(std::memory_order_acquire)) == 3) std::this_thread::yield();
    return s;
  }
  std::exception_ptr failure;
  try {
    if (!backend->query(e->handle)) return 0;
    failure = host_failure(*e);
  } catch (...) {
    failure = std::current_exception();
  }
  int expected = 0;
  if (!failure) {
    e->state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel);
  } else if (e->state.compare_exchange_strong(expected, 3, std::memory_order_acq_rel)) {
    e->error = failure;
    e->state.store(2, std::memory_order_release);
    note_error(failure);
  }
  return status_cached(e);
}

std::exception_ptr Runtime::Impl::host_failure(const Event& e) noexcept {
  if (e.stream == nullptr) return nullptr;
  const HostState& h = *e.stream->host;
  const std::uint64_t at = h.failed_at.load(std::memory_order_acquire);
  return at < e.host_count ? h.error : nullptr;
}

void Runtime::Impl::record_on(StreamState* st, Event* e) {
  e->stream = st;
  e->host_count = st->host->enqueued.load(std::memory_order_acquire);
  backend->record(e->handle, st->handle);
}

// ------------------------------------------------------------------ device errors

void Runtime::Impl::note_error(const std::exception_ptr& error) noexcept {
  try {
    std::lock_guard lock(error_mutex);
    for (const DeviceError& d : device_errors) {
      if (d.error == error) return;
    }
    device_errors.push_back({error, false});
  } catch (...) {
    // out of memory: the error still reaches its consumers, not wait_for_all
  }
}

void Runtime::Impl::observe(const std::exception_ptr& error) noexcept {
  if (!error) return;
  note_error(error);
  std::lock_guard lock(error_mutex);
  for (DeviceError& d : device_errors) {
    if (d.error == error) d.observed = true;
  }
}

std::exception_ptr Runtime::Impl::take_error() noexcept {
  std::lock_guard lock(error_mutex);
  for (DeviceError& d : device_errors) {
    if (!d.observed) {
      d.observed = true;
      return d.error;
    }
  }
  return nullptr;
}

// ------------------------------------------------------------------ host tasks

void Runtime::Impl::run_host(StreamState* st, std::uint64_t k, const HostFn& fn) noexcept {
  HostState& h = *st->host;
  if (h.failed_at.load(std::memory_order_acquire) != HostState::none) return;
  try {
    fn();
  } catch (...) {
    fail_stream(h, k, std::current_exception());
  }
}

void Runtime::Impl::fail_stream(HostState& h, std::uint64_t k, std::exception_ptr error) noexcept {
  if (h.failed_at.load(std::memory_order_relaxed) != HostState::none) return;  // only the stream's tasks write it
  note_error(error);
  h.error = std::move(error);
  h.failed_at.store(k, std::memory_order_release);
}

void Runtime::Impl::enqueue_host(StreamState* st, std::function<void(std::uint64_t)> body) {
  const std::uint64_t k = st->host->enqueued.fetch_add(1, std::memory_order_acq_rel);
  backend->host_task(st->handle, [k, body = std::move(body)] { body(k); });
}

void Runtime::Impl::propagate_host_failure(StreamState* dst, const Event& e) {
  if (e.stream == nullptr || e.host_count == 0) return;
  const HostState* src = e.stream->host.get();
  const std::uint64_t before = e.host_count;
  enqueue_host(dst, [this, dst, src, before](std::uint64_t k) {
    const std::uint64_t at = src->failed_at.load(std::memory_order_acquire);
    if (at < before) fail_stream(*dst->host, k, src->error);
  });
}

}  // namespace ordo::gpu
