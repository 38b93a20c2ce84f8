// ordo/detail/timer_service.hpp - an engine's timers: the one mechanism behind
// ordo::sleep_for / sleep_until / with_timeout. Internal (see ordo/timer.hpp).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace ordo::detail {

/// The deadlines of one engine. Every timer is armed here, and this class
/// alone decides who expires it: a Delegate when one is attached (ordo::io's
/// io_uring Reactor: the ring's timeouts, delivered by an idle worker waiting
/// in the ring or by its reaper), otherwise the service's own timer thread
/// (started by the first timer that lands on it, joined by the destructor),
/// which keeps its deadlines in order and sleeps until the earliest. A timer
/// a delegate can no longer serve (its Reactor is being destroyed) is handed
/// back with settle() and moves to the thread, keeping its deadline. Either
/// way, whoever expires a timer only does bookkeeping: it calls `fire`, which
/// hands the work on (a post to the engine's workers). No thread is blocked
/// per timer.
///
/// @par Thread safety
/// arm, disarm, settle, attach and detach may be called from any thread,
/// concurrently. `fire` runs outside the service's lock, at most once per
/// arm, and never for a timer that disarm removed; it may run inside arm
/// (a delegate that delivers the expiry inline) and must cope with that.
class TimerService {
 public:
  struct Claim;
  class Delegate;

  /// One deadline. Owned by its user, who must keep it alive until `fire`
  /// has been called or disarm() returned true.
  struct Timer {
    std::int64_t deadline_ns = 0;  ///< steady_clock, in ns since its epoch
    void (*fire)(Timer*) noexcept = nullptr;
    std::uint64_t seq = 0;   ///< set when it lands on the thread: FIFO among equal deadlines (guarded by the lock)
    bool armed = false;      ///< on the thread's list (guarded by the lock)
    Claim* claim = nullptr;  ///< the delegate's hold while one serves it (guarded by the lock, see Delegate)
  };

  /// A delegate's hold on one timer, embedded in the delegate's record of
  /// it. `timer` is set by hold() before the record can complete, and
  /// cleared (under the service's lock) by whichever comes first: settle()
  /// (expiry or hand-back) or disarm(). The record must stay alive until
  /// the delegate's settle() of it has returned.
  struct Claim {
    Timer* timer = nullptr;
    Delegate* owner = nullptr;
  };

  /// Serves timers faster than the thread can. One at a time per service.
  class Delegate {
   public:
    /// Takes `t` (its deadline is absolute, steady_clock): makes a record
    /// holding a Claim, calls hold() on it, then starts what expires it; on
    /// expiry or when it cannot serve the timer after all (shutdown, an
    /// error), calls settle() once. False: it could not take it (nothing
    /// was held; the thread serves it).
    virtual bool arm(TimerService& service, Timer* t) noexcept = 0;
    /// Called under the service's lock for a record whose timer was just
    /// disarmed: true if the record's expiry is still pending and now kept
    /// alive for cancel(). Must not block or call back into the service.
    virtual bool retain(Claim* c) noexcept = 0;
    /// After a true retain(), outside the lock: ends the record early (its
    /// settle() then finds no timer) and drops what retain() kept.
    virtual void cancel(Claim* c) noexcept = 0;

   protected:
    ~Delegate() = default;
  };

  TimerService() = default;
  TimerService(const TimerService&) = delete;
  TimerService& operator=(const TimerService&) = delete;
  /// Fires every timer still armed (at once: an early wake-up, so that no
  /// coroutine stays suspended on a dead engine), then joins the thread.
  /// No delegate may be attached then (a Reactor dies before its engine).
  ~TimerService();

  /// Arms `t` (deadline_ns and fire set). Throws std::bad_alloc or
  /// std::system_error (thread start) on failure, leaving `t` disarmed.
  void arm(Timer* t);
  /// Removes `t` if it has not fired: true then (fire will not be called);
  /// false if it fired or is firing (fire is called, or was).
  bool disarm(Timer* t) noexcept;
  /// Timers armed and not fired (a snapshot), the delegate's included.
  [[nodiscard]] std::size_t pending() const;
  /// The timer thread has been started (tests: a delegate serves them all).
  [[nodiscard]] bool thread_started() const;
  /// steady_clock now, in the unit of Timer::deadline_ns.
  [[nodiscard]] static std::int64_t now_ns() noexcept;

  /// From now on `d` serves the timers armed here. False if another
  /// delegate is attached (the first keeps them).
  bool attach(Delegate* d);
  /// Undoes attach(): returns once no arm, disarm or cancel is inside `d`.
  /// Timers it still holds stay its own until it settle()s them.
  void detach(Delegate* d) noexcept;
  /// For Delegate::arm, before the record can complete.
  static void hold(Claim& c, Timer* t, Delegate* owner) noexcept {
    c.timer = t;
    c.owner = owner;
    t->claim = &c;
  }
  /// The delegate is done with the record holding `c`: `expired`, the
  /// timer fires here; otherwise it moves to the thread, keeping its
  /// deadline (fired at once only if the thread cannot be started or the
  /// service is being destroyed). Nothing happens for a disarmed timer.
  void settle(Claim* c, bool expired) noexcept;

 private:
  void run() noexcept;
  /// Puts `t` on the thread's list, starting the thread if needed (lock held).
  void insert_locked(Timer* t);
  /// A delegate call ended (lock held).
  void leave_locked() noexcept;

  mutable std::mutex m_;
  std::condition_variable cv_;        ///< the thread's: a new earliest deadline, or stopping_
  std::condition_variable users_cv_;  ///< detach's: users_ reached 0
  std::map<std::pair<std::int64_t, std::uint64_t>, Timer*> timers_;  ///< by deadline; guarded by m_
  std::uint64_t seq_ = 0;         ///< guarded by m_
  bool stopping_ = false;         ///< guarded by m_
  std::thread thread_;            ///< started under m_ by the first timer on the list
  Delegate* delegate_ = nullptr;  ///< guarded by m_
  int users_ = 0;                 ///< calls into a delegate in progress; guarded by m_
  std::size_t delegated_ = 0;     ///< timers a delegate holds; guarded by m_
};

}  // namespace ordo::detail
