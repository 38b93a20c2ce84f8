// src/timer_service.cpp - detail::TimerService: one thread expires an engine's deadlines.
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
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { run(); });
  t->seq = ++seq_;
  const bool earliest = timers_.empty() || t->deadline_ns < timers_.begin()->first.first;
  timers_.emplace(std::make_pair(t->deadline_ns, t->seq), t);
  t->armed = true;
  if (stopping_) {  // the engine is being destroyed: fire at once, here
    timers_.erase(std::make_pair(t->deadline_ns, t->seq));
    t->armed = false;
    lock.unlock();
    t->fire(t);
    return;
  }
  if (earliest) cv_.notify_one();
}

bool TimerService::disarm(Timer* t) noexcept {
  std::lock_guard lock(m_);
  if (!t->armed) return false;
  timers_.erase(std::make_pair(t->deadline_ns, t->seq));
  t->armed = false;
  return true;
}

std::size_t TimerService::pending() const {
  std::lock_guard lock(m_);
  return timers_.size();
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
