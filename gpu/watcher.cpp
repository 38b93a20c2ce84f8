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
    p.seq = ++watch_seq;
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
  if (prof != nullptr) [[unlikely]] trace_finished(p);
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
    auto remove = [&](std::size_t i) {
      finish(local[i]);
      if (i + 1 != local.size()) local[i] = std::move(local.back());
      local.pop_back();
      ++done;
    };
    // A wait_idle returns only once what was watched before it is finished
    // too (the ops it held released, its GPU work in the trace): its events
    // were recorded after theirs on every stream, yet may be seen first.
    std::uint64_t oldest = ~std::uint64_t{0};  // of the items left, barriers aside
    for (std::size_t i = 0; i < local.size();) {
      Pending& p = local[i];
      while (p.next < p.events.size()) {
        Event* e = p.events[p.next];
        const int s = status(e);
        if (s == 0) break;
        if (s == 2 && !p.error) p.error = e->error;
        ++p.next;
      }
      if (p.next == p.events.size() && !p.barrier) {
        remove(i);
      } else {
        if (!p.barrier) oldest = std::min(oldest, p.seq);
        ++i;
      }
    }
    for (std::size_t i = 0; i < local.size();) {
      if (local[i].barrier && local[i].next == local[i].events.size() && local[i].seq < oldest) {
        remove(i);
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
      // Not a barrier whose events are done: it waits for an older item.
      auto p = std::find_if(local.begin(), local.end(), [](const Pending& x) { return x.next < x.events.size(); });
      try {
        if (p != local.end()) backend->synchronize(p->events[p->next]->handle);  // yields the CPU until it completes
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
  p.barrier = true;
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
