// gpu/watcher.cpp - the one thread that watches pending events, so that no
// worker ever waits for the GPU: it releases held ops and calls completion
// callbacks once their events finished (bookkeeping only, never user code).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "runtime_impl.hpp"

namespace ordo::gpu {

void Runtime::Impl::watch(Pending p) noexcept {
  try {
    std::lock_guard lock(watch_mutex);
    incoming.push_back(std::move(p));
    ++pending;
    // Under the lock: once it is released the item may be finished and the
    // Runtime destroyed by the thread that waited for it.
    watch_cv.notify_one();
  } catch (...) {
    std::terminate();  // losing a held op would hang the engine; out of memory here is fatal
  }
}

void Runtime::Impl::finish(Pending& p) noexcept {
  for (Event* e : p.events) unref(e);
  p.events.clear();
  if (!p.held.empty()) {
    release_held(p.held, std::move(p.error));
  } else if (p.then) {
    try {
      p.then(std::move(p.error));
    } catch (...) {
    }
  }
}

void Runtime::Impl::watcher_main() {
  const CompletionThread scope;  // releases dispatch to workers, never run user code here
  std::vector<Pending> local;
  unsigned idle_rounds = 0;
  for (;;) {
    {
      std::unique_lock lock(watch_mutex);
      if (local.empty()) watch_cv.wait(lock, [&] { return stop || !incoming.empty(); });
      for (auto& p : incoming) local.push_back(std::move(p));
      incoming.clear();
      if (stop && local.empty()) return;
    }
    std::size_t done = 0;
    for (std::size_t i = 0; i < local.size();) {
      Pending& p = local[i];
      while (p.next < p.events.size()) {
        Event* e = p.events[p.next];
        const int s = status(e);
        if (s == 0) break;
        if (s == 2 && !p.error) p.error = e->error;
        ++p.next;
      }
      if (p.next == p.events.size()) {
        finish(p);
        if (i + 1 != local.size()) local[i] = std::move(local.back());
        local.pop_back();
        ++done;
      } else {
        ++i;
      }
    }
    if (done > 0) {
      idle_rounds = 0;
      std::lock_guard lock(watch_mutex);
      pending -= done;
      if (pending == 0) drained_cv.notify_all();
      continue;
    }
    if (local.empty()) continue;
    // Nothing finished this round.
    if (opts.watch == WatchMode::blocking_sync) {
      Pending& p = local.front();
      try {
        backend->synchronize(p.events[p.next]->handle);  // yields the CPU until it completes
      } catch (...) {
        // the failure is picked up by the next status() query
      }
      continue;
    }
    ++idle_rounds;
    if (idle_rounds < 32) {
      std::this_thread::yield();
      continue;
    }
    const auto nap = std::chrono::microseconds(std::min(50U, 1U << std::min(idle_rounds - 32, 6U)));
    std::unique_lock lock(watch_mutex);
    watch_cv.wait_for(lock, nap, [&] { return stop || !incoming.empty(); });
  }
}

void Runtime::Impl::wait_idle() {
  std::vector<Event*> events;
  events.reserve(devices.size() * 4);
  auto mark = [&](StreamState& st) {
    Event* e = acquire(st.phys);
    try {
      record_on(&st, e);
      events.push_back(e);
    } catch (...) {
      unref(e);
      try {
        backend->synchronize_stream(st.handle);  // a sticky CUDA error refuses the record: report that
      } catch (...) {
        note_error(std::current_exception());
      }
    }
  };
  try {
    for (auto& ds : devices) {
      for (auto& st : ds.compute) mark(st);
      mark(ds.h2d);
      mark(ds.d2h);
    }
  } catch (...) {
    for (Event* e : events) unref(e);
    throw;
  }
  if (events.empty()) return;
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  Pending p;
  p.events = std::move(events);
  p.then = [&](const std::exception_ptr&) {
    std::lock_guard lock(mutex);
    done = true;
    cv.notify_all();  // under the lock: the waiter's frame goes away once it is released
  };
  watch(std::move(p));
  std::unique_lock lock(mutex);
  cv.wait(lock, [&] { return done; });
}

}  // namespace ordo::gpu
