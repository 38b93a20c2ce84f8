// ordo/semaphore.hpp - an async counting semaphore for coroutines.
//
//   ordo::Semaphore lanes(4);                     // four permits
//   {
//     ordo::SemaphorePermit p = co_await lanes.permit();   // suspends while none is free
//     co_await work();
//   }                                             // the permit goes back here
//
// Waiters are granted in FIFO order. A waiter granted by release() resumes on
// the thread that called release (through that thread's trampoline: inline
// where no coroutine runs there, else as soon as the running one suspends).
// acquire/permit take a std::stop_token: a stop before the grant resumes the
// waiter at once (on the thread requesting it) with ordo::CancelledError and
// takes no permit; a stop after the grant has no effect.
#pragma once

#include <cstddef>
#include <coroutine>
#include <mutex>
#include <stop_token>
#include <utility>

#include "ordo/coro.hpp"
#include "ordo/detail/wait_list.hpp"
#include "ordo/error.hpp"

namespace ordo {

class Semaphore;

/// One permit of a Semaphore, given back when destroyed (or by release()).
/// Move-only; an empty permit (default-constructed, moved from, released)
/// gives nothing back.
///
/// @par Thread safety
/// One owner at a time.
class SemaphorePermit {
 public:
  SemaphorePermit() noexcept = default;
  SemaphorePermit(SemaphorePermit&& o) noexcept : sem_(std::exchange(o.sem_, nullptr)) {}
  SemaphorePermit& operator=(SemaphorePermit&& o) noexcept {
    if (this != &o) {
      release();
      sem_ = std::exchange(o.sem_, nullptr);
    }
    return *this;
  }
  SemaphorePermit(const SemaphorePermit&) = delete;
  SemaphorePermit& operator=(const SemaphorePermit&) = delete;
  ~SemaphorePermit() { release(); }
  /// Gives the permit back now (no effect on an empty permit).
  inline void release() noexcept;
  [[nodiscard]] explicit operator bool() const noexcept { return sem_ != nullptr; }

 private:
  friend class Semaphore;
  explicit SemaphorePermit(Semaphore* s) noexcept : sem_(s) {}
  Semaphore* sem_ = nullptr;
};

/// A counting semaphore whose acquire is awaited, never blocking a thread.
/// It must outlive every waiter and every permit.
///
/// @par Thread safety
/// Every member may be called from any thread or coroutine, concurrently.
/// A release() happens-before the acquire it grants.
class Semaphore {
 public:
  explicit Semaphore(std::ptrdiff_t permits) : count_(permits) {
    if (permits < 0) throw Error(Errc::invalid_argument, "Semaphore: negative permit count");
  }
  Semaphore(const Semaphore&) = delete;
  Semaphore& operator=(const Semaphore&) = delete;
  ~Semaphore() = default;

  /// `co_await sem.acquire()`: takes one permit, suspending while none is
  /// free. Give it back with release().
  class [[nodiscard]] AcquireAwaiter {
   public:
    AcquireAwaiter(Semaphore& s, std::stop_token stop) noexcept : s_(&s), stop_(std::move(stop)) {}
    AcquireAwaiter(const AcquireAwaiter&) = delete;
    AcquireAwaiter& operator=(const AcquireAwaiter&) = delete;
    bool await_ready() {
      if (stop_.stop_requested()) throw_cancelled();
      return s_->try_acquire();
    }
    bool await_suspend(std::coroutine_handle<> h) {
      {
        std::lock_guard lock(s_->m_);
        if (s_->count_ > 0) {
          --s_->count_;
          node_.outcome = detail::WaitNode::Outcome::granted;
          return false;
        }
        node_.owner = s_;
        node_.cancel = &Semaphore::cancel_waiter;
        s_->waiters_.push_back(&node_);
      }
      return node_.arm(h, stop_);
    }
    void await_resume() {
      node_.disarm();
      if (node_.outcome == detail::WaitNode::Outcome::cancelled) throw_cancelled();
    }

   protected:
    [[noreturn]] static void throw_cancelled() {
      throw CancelledError("ordo: Semaphore::acquire cancelled before a permit was granted");
    }
    Semaphore* s_;
    std::stop_token stop_;
    detail::WaitNode node_;
  };

  /// `co_await sem.permit()`: as acquire(), yielding a SemaphorePermit that
  /// releases the permit when it goes out of scope.
  class [[nodiscard]] PermitAwaiter : public AcquireAwaiter {
   public:
    using AcquireAwaiter::AcquireAwaiter;
    SemaphorePermit await_resume() {
      AcquireAwaiter::await_resume();
      return SemaphorePermit(s_);
    }
  };

  [[nodiscard]] AcquireAwaiter acquire(std::stop_token stop = {}) noexcept { return {*this, std::move(stop)}; }
  [[nodiscard]] PermitAwaiter permit(std::stop_token stop = {}) noexcept { return {*this, std::move(stop)}; }

  /// Takes a permit if one is free, without waiting.
  [[nodiscard]] bool try_acquire() noexcept {
    std::lock_guard lock(m_);
    if (count_ <= 0) return false;
    --count_;
    return true;
  }

  /// Gives `n` permits back: the longest waiting acquirers get them first
  /// and resume on this thread (see the header comment).
  void release(std::ptrdiff_t n = 1) noexcept {
    detail::SettleList granted;
    {
      std::lock_guard lock(m_);
      while (n > 0 && !waiters_.empty()) {
        granted.push_back(waiters_.pop_front());
        --n;
      }
      count_ += n;
    }
    granted.settle_all(detail::WaitNode::Outcome::granted);
  }

  /// Free permits now (a snapshot).
  [[nodiscard]] std::ptrdiff_t available() const noexcept {
    std::lock_guard lock(m_);
    return count_;
  }

 private:
  static void cancel_waiter(void* owner, detail::WaitNode* node) noexcept {
    auto* s = static_cast<Semaphore*>(owner);
    {
      std::lock_guard lock(s->m_);
      if (!node->linked) return;  // granted first
      s->waiters_.unlink(node);
    }
    node->settle(detail::WaitNode::Outcome::cancelled);
  }

  mutable std::mutex m_;
  std::ptrdiff_t count_;          ///< free permits; guarded by m_ (> 0 only while no one waits)
  detail::WaitList waiters_;      ///< acquirers in arrival order; guarded by m_
};

inline void SemaphorePermit::release() noexcept {
  if (Semaphore* s = std::exchange(sem_, nullptr)) s->release();
}

}  // namespace ordo
