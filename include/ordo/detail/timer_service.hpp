// ordo/detail/timer_service.hpp - an engine's timers: the one mechanism behind
// ordo::sleep_for / sleep_until / with_timeout and ordo::io's sleep_for.
// Internal (see ordo/timer.hpp).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace ordo::detail {

/// Deadlines of one engine, kept in order and expired by one timer thread
/// (started by the first arm, joined by the destructor). The thread only
/// does bookkeeping: it calls each expired timer's `fire`, which hands the
/// work on (a post to the engine's workers, an io request's delivery). No
/// thread is blocked per timer.
///
/// @par Thread safety
/// arm and disarm may be called from any thread, concurrently; `fire` runs
/// on the timer thread, outside the service's lock, at most once per arm,
/// and never for a timer that disarm removed.
class TimerService {
 public:
  /// One deadline. Owned by its user, who must keep it alive until `fire`
  /// has been called or disarm() returned true.
  struct Timer {
    std::int64_t deadline_ns = 0;  ///< steady_clock, in ns since its epoch
    void (*fire)(Timer*) noexcept = nullptr;
    std::uint64_t seq = 0;   ///< set by arm: FIFO among equal deadlines (guarded by the service's lock)
    bool armed = false;      ///< guarded by the service's lock
  };

  TimerService() = default;
  TimerService(const TimerService&) = delete;
  TimerService& operator=(const TimerService&) = delete;
  /// Fires every timer still armed (at once: an early wake-up, so that no
  /// coroutine stays suspended on a dead engine), then joins the thread.
  ~TimerService();

  /// Arms `t` (deadline_ns and fire set). Throws std::bad_alloc or
  /// std::system_error (thread start) on failure, leaving `t` disarmed.
  void arm(Timer* t);
  /// Removes `t` if it has not fired: true then (fire will not be called);
  /// false if it fired or is firing (fire is called, or was).
  bool disarm(Timer* t) noexcept;
  /// Timers armed and not fired (a snapshot).
  [[nodiscard]] std::size_t pending() const;
  /// steady_clock now, in the unit of Timer::deadline_ns.
  [[nodiscard]] static std::int64_t now_ns() noexcept;

 private:
  void run() noexcept;

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::map<std::pair<std::int64_t, std::uint64_t>, Timer*> timers_;  ///< by deadline; guarded by m_
  std::uint64_t seq_ = 0;  ///< guarded by m_
  bool stopping_ = false;  ///< guarded by m_
  std::thread thread_;     ///< started under m_ by the first arm
};

}  // namespace ordo::detail
