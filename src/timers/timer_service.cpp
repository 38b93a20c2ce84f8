// src/timers/timer_service.cpp - detail::TimerService: an engine's deadlines, expired by
// its delegate (ordo::io's ring) or by one timer thread.
#include "ordo/detail/timer_service.hpp"

#include <chrono>
#include <vector>

namespace ordo::detail {

std::int64_t TimerService::now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void TimerService::arm(Timer* t) {
  std::unique_lock lock(m_);
  t->claim = nullptr;
  if (stopping_) {  // the engine is being destroyed: fire at once, here
    lock.unlock();
    t->fire(t);
    return;
  }
  if (Delegate* d = delegate_) {
    // Counted before the call: the delegate may settle the timer (expired,
    // or handed back) before arm returns.
    ++users_;
    ++delegated_;
    lock.unlock();
    const bool taken = d->arm(*this, t);
    lock.lock();
    if (!taken) --delegated_;
    leave_locked();
    if (taken) return;
  }
  insert_locked(t);
}

void TimerService::insert_locked(Timer* t) {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  t->seq = ++seq_;
  const bool earliest = timers_.empty() || t->deadline_ns < timers_.begin()->first.first;
  timers_.emplace(std::make_pair(t->deadline_ns, t->seq), t);
  t->armed = true;
  if (earliest) cv_.notify_one();
}

void TimerService::leave_locked() noexcept {
  if (--users_ == 0) users_cv_.notify_all();
}

bool TimerService::disarm(Timer* t) noexcept {
  Claim* c = nullptr;
  Delegate* d = nullptr;
  {
    std::lock_guard lock(m_);
    if (t->armed) {
      timers_.erase(std::make_pair(t->deadline_ns, t->seq));
      t->armed = false;
      return true;
    }
    c = t->claim;
    if (c == nullptr) return false;  // fired, or firing
    t->claim = nullptr;
    c->timer = nullptr;  // its settle() now does nothing
    --delegated_;
    // A delegate that detached ends its records itself (a Reactor's
    // destruction cancels every request).
    if (c->owner == delegate_ && delegate_->retain(c)) {
      d = delegate_;
      ++users_;
    }
  }
  if (d != nullptr) {
    // Outside the lock: the cancel may deliver the record here, and its
    // settle() takes the lock.
    d->cancel(c);
    std::lock_guard lock(m_);
    leave_locked();
  }
  return true;
}

void TimerService::settle(Claim* c, bool expired) noexcept {
  std::unique_lock lock(m_);
  Timer* t = c->timer;
  if (t == nullptr) return;  // disarmed first
  c->timer = nullptr;
  t->claim = nullptr;
  --delegated_;
  if (!expired && !stopping_) {
    try {
      insert_locked(t);
      return;
    } catch (...) {
      // No thread or no memory to keep it: an early wake-up, not a lost one.
    }
  }
  lock.unlock();
  t->fire(t);
}

bool TimerService::attach(Delegate* d) {
  std::lock_guard lock(m_);
  if (delegate_ != nullptr || stopping_) return false;
  delegate_ = d;
  return true;
}

void TimerService::detach(Delegate* d) noexcept {
  std::unique_lock lock(m_);
  if (delegate_ != d) return;
  delegate_ = nullptr;
  users_cv_.wait(lock, [this] { return users_ == 0; });
}

std::size_t TimerService::pending() const {
  std::lock_guard lock(m_);
  return timers_.size() + delegated_;
}

bool TimerService::thread_started() const {
  std::lock_guard lock(m_);
  return thread_.joinable();
}

void TimerService::run() noexcept {
  std::vector<Timer*> due;
  std::unique_lock lock(m_);
  for (;;) {
    if (stopping_) return;
    if (timers_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const std::int64_t next = timers_.begin()->first.first;
    const std::int64_t now = now_ns();
    if (next > now) {
      cv_.wait_for(lock, std::chrono::nanoseconds(next - now));
      continue;
    }
    while (!timers_.empty() && timers_.begin()->first.first <= now) {
      Timer* t = timers_.begin()->second;
      timers_.erase(timers_.begin());
      t->armed = false;
      due.push_back(t);
    }
    lock.unlock();
    for (Timer* t : due) t->fire(t);  // bookkeeping only: a post, a delivery
    due.clear();
    lock.lock();
  }
}

TimerService::~TimerService() {
  std::vector<Timer*> left;
  {
    std::lock_guard lock(m_);
    stopping_ = true;
    for (auto& [key, t] : timers_) {
      t->armed = false;
      left.push_back(t);
    }
    timers_.clear();
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  for (Timer* t : left) t->fire(t);
}

}  // namespace ordo::detail
