// ordo/timer.hpp - timers for coroutines without the I/O layer.
//
//   co_await ordo::sleep_for(engine, std::chrono::milliseconds(5));
//   co_await ordo::sleep_until(engine, deadline);              // a steady_clock time_point
//   int v = co_await ordo::with_timeout(engine, std::chrono::seconds(1),
//                                       [&](std::stop_token st) { return fetch(st); });  // or Errc::timed_out
//
// One mechanism per engine (detail::TimerService) expires the deadlines: an
// io_uring reactor's ring where the engine has one, else one timer thread. No
// thread is blocked per timer, and a sleeping coroutine resumes on a worker.
// The details: sleep_for below; docs/coroutines.md, "Timers".
#pragma once

#include <atomic>
#include <chrono>
#include <coroutine>
#include <optional>
#include <stop_token>
#include <type_traits>
#include <utility>

#include "ordo/coro.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/detail/timer_service.hpp"
#include "ordo/engine.hpp"
#include "ordo/task.hpp"
#include "ordo/when_any.hpp"

namespace ordo {

/// `co_await` suspends until the deadline (see sleep_for / sleep_until).
///
/// @par Thread safety
/// One coroutine awaits it; the expiry (timer thread or ring) and a stop
/// request (any thread) race on one atomic word, exactly one completes it.
class [[nodiscard]] SleepAwaiter {
 public:
  SleepAwaiter(Engine& engine, std::int64_t deadline_ns, Context ctx, std::stop_token stop) noexcept
      : engine_(&engine), ctx_(ctx), stop_(std::move(stop)) {
    node_.self = this;
    node_.deadline_ns = deadline_ns;
    node_.fire = &SleepAwaiter::on_fire;
  }
  SleepAwaiter(const SleepAwaiter&) = delete;
  SleepAwaiter& operator=(const SleepAwaiter&) = delete;

  bool await_ready() const noexcept {
    return stop_.stop_requested() || node_.deadline_ns <= detail::TimerService::now_ns();
  }
  bool await_suspend(std::coroutine_handle<> h) {
    h_ = h;
    service_ = &detail::EngineExtension::timers(*engine_);
    service_->arm(&node_);
    if (stop_.stop_possible()) on_stop_.emplace(stop_, Cancel{this});
    if (state_.exchange(kSuspended, std::memory_order_acq_rel) != kSettled) return true;
    if (cancelled_) return false;  // stopped while arming: goes on here, with CancelledError
    // Expired while arming (on_fire left the post to this side): resumed
    // on a worker all the same, never on the awaiting thread.
    return post_resume(engine_, h, ctx_);
  }
  void await_resume() {
    on_stop_.reset();
    if (cancelled_ || (service_ == nullptr && stop_.stop_requested())) {
      throw CancelledError("ordo: sleep cancelled before its deadline (its stop_token was stopped)");
    }
  }

 private:
  static constexpr int kArming = 0;
  static constexpr int kSuspended = 1;
  static constexpr int kSettled = 2;
  struct Node : detail::TimerService::Timer {
    SleepAwaiter* self = nullptr;
  };
  struct Cancel {
    SleepAwaiter* self;
    void operator()() const noexcept {
      SleepAwaiter* s = self;
      if (!s->service_->disarm(&s->node_)) return;  // expired first: the timer posts the resumption
      s->cancelled_ = true;
      if (s->state_.exchange(kSettled, std::memory_order_acq_rel) == kSuspended) detail::resume(s->h_);
    }
  };
  /// Hands `h` to a worker; true if posted. The caller touches the frame no
  /// more: a worker may resume it at once.
  static bool post_resume(Engine* engine, std::coroutine_handle<> h, Context ctx) noexcept {
    try {
      engine->post(detail::ResumeTask{h}, ctx, OpAttrs{.name = "ordo::sleep_for"});
      return true;
    } catch (...) {
      return false;  // out of memory: resumed by the caller rather than lost
    }
  }
  /// Where the expiry is delivered (the timer thread, or the ring's reaper or
  /// idle worker): hands the coroutine to a worker (bookkeeping only).
  /// Still arming: await_suspend sees the timer settled and posts it.
  static void on_fire(detail::TimerService::Timer* t) noexcept {
    SleepAwaiter* s = static_cast<Node*>(t)->self;
    if (s->state_.exchange(kSettled, std::memory_order_acq_rel) != kSuspended) return;
    const std::coroutine_handle<> h = s->h_;
    if (!post_resume(s->engine_, h, s->ctx_)) detail::resume(h);
  }

  Engine* engine_;
  Context ctx_;
  std::stop_token stop_;
  Node node_;
  detail::TimerService* service_ = nullptr;
  std::coroutine_handle<> h_;
  bool cancelled_ = false;  ///< written by the stop callback before `state_`
  std::atomic<int> state_{kArming};
  std::optional<std::stop_callback<Cancel>> on_stop_;
};

/// Suspends the coroutine for `d` (at least), then resumes it on a worker of
/// `ctx`. A duration <= 0 does not suspend.
///
/// One mechanism per engine (detail::TimerService), which decides who expires
/// each deadline: when the engine has an io_uring ordo::io::Reactor (its
/// first one), the ring's timeouts, delivered as io's own sleeps are (by an
/// idle worker waiting in the ring, or the reaper): no timer thread; otherwise
/// one timer thread that keeps the deadlines in order, started by the first
/// timer and joined by the engine's destructor. A sleep pending when its
/// reactor is destroyed moves to that thread with its deadline (it neither
/// wakes early nor fails). No thread is blocked per timer. Whoever expires a
/// timer only posts: a sleeping coroutine resumes on a worker of the engine
/// (Context::cpu(), or the context given), never on the timer thread, the
/// reaper or inside await_suspend. A std::stop_token cancels a sleep that has
/// not expired: the coroutine resumes at once, on the thread requesting the
/// stop, with ordo::CancelledError. Sleeping coroutines follow the engine's
/// rule for coroutines: finish them before destroying the engine (one still
/// asleep then is woken early, as the engine drains).
template <class Rep, class Period>
[[nodiscard]] SleepAwaiter sleep_for(Engine& engine, std::chrono::duration<Rep, Period> d, std::stop_token stop = {},
                                     Context ctx = Context::cpu()) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  return SleepAwaiter(engine, detail::TimerService::now_ns() + (ns > 0 ? ns : 0), ctx, std::move(stop));
}

/// Suspends the coroutine until `t` (at least). Clocks other than
/// steady_clock are converted once, now (a later jump of that clock is not
/// followed).
template <class Clock, class Duration>
[[nodiscard]] SleepAwaiter sleep_until(Engine& engine, std::chrono::time_point<Clock, Duration> t,
                                       std::stop_token stop = {}, Context ctx = Context::cpu()) {
  if constexpr (std::is_same_v<Clock, std::chrono::steady_clock>) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    return SleepAwaiter(engine, ns, ctx, std::move(stop));
  } else {
    return sleep_for(engine, t - Clock::now(), std::move(stop), ctx);
  }
}

namespace detail {
inline Task<void> deadline_task(Engine& engine, std::chrono::nanoseconds d, std::stop_token stop) {
  co_await sleep_for(engine, d, std::move(stop));
}
template <class T>
Task<T> with_timeout_impl(Engine& engine, std::chrono::nanoseconds d, std::stop_source stop, Task<T> work) {
  auto r = co_await when_any(stop, std::move(work), deadline_task(engine, d, stop.get_token()));
  if (r.index() == 1) throw Error(Errc::timed_out, "ordo::with_timeout: the deadline passed first");
  if constexpr (!std::is_void_v<T>) co_return std::move(std::get<0>(r));
}
}  // namespace detail

/// Runs `fn(token)` (a Task<T>) against a deadline `d`: yields its result if
/// it finishes first; otherwise requests a stop through the token and, once
/// the task has finished (it is always joined), throws
/// ordo::Error{Errc::timed_out}. An exception the task throws before the
/// deadline is rethrown. The task must pass the token to what it awaits for
/// the deadline to cut it short.
/// fn is kept (moved into this task) until the task it made has finished,
/// so a coroutine lambda's captures stay valid.
template <class Rep, class Period, class F>
  requires std::is_invocable_v<F&, std::stop_token>
[[nodiscard]] auto with_timeout(Engine& engine, std::chrono::duration<Rep, Period> d, F fn)
    -> Task<typename std::invoke_result_t<F&, std::stop_token>::value_type> {
  std::stop_source stop;
  auto work = fn(stop.get_token());
  co_return co_await detail::with_timeout_impl(engine, std::chrono::duration_cast<std::chrono::nanoseconds>(d),
                                               std::move(stop), std::move(work));
}

/// As above for a task made with a token of `stop` (which with_timeout stops
/// when the deadline passes first).
template <class Rep, class Period, class T>
[[nodiscard]] Task<T> with_timeout(Engine& engine, std::chrono::duration<Rep, Period> d, std::stop_source stop,
                                   Task<T> task) {
  return detail::with_timeout_impl(engine, std::chrono::duration_cast<std::chrono::nanoseconds>(d), std::move(stop),
                                   std::move(task));
}

}  // namespace ordo
