// ordo/detail/asio_op.hpp - the shared state behind ordo::asio operations and
// the op body that fills it. Internal (see ordo/asio.hpp).
#pragma once

#include <asio/associated_allocator.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/bind_allocator.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/execution.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <asio/system_error.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "ordo/context.hpp"
#include "ordo/coro.hpp"
#include "ordo/detail/asio_inline.hpp"
#include "ordo/detail/asio_pending.hpp"
#include "ordo/detail/error_ref.hpp"
#include "ordo/engine.hpp"
#include "ordo/error.hpp"
#include "ordo/on_complete.hpp"

namespace ordo::asio_detail {

/// What a function of type F (called as F(RunContext) or F()) returns: the
/// coroutine layer's detail::fn_result_t (named through invoke_result), so
/// that a non-callable F (a std::stop_token, say) is a substitution failure
/// for every compiler; FnBody::call's deduced return type made it a hard
/// error (clang 14 and g++ alike) in push_signature_t.
template <class F>
using fn_result_t = detail::fn_result_t<F>;

/// The completion signature of an operation whose fn returns R.
template <class R>
struct signature {
  using type = void(std::exception_ptr, R);
};
template <>
struct signature<void> {
  using type = void(std::exception_ptr);
};
template <class R>
using signature_t = typename signature<R>::type;

template <class R>
struct StateBase;

/// A handler attached to a state, with the work guard that keeps its
/// executor busy while the operation is pending. Allocated with the
/// handler's associated allocator; post() hands the handler to its executor
/// and frees this object before the handler runs (Asio's rule: memory an
/// operation allocated for a handler is released before the upcall);
/// discard() frees it without calling the handler. Registered with its
/// executor's context (asio_pending.hpp) while pending, when that names one.
template <class R>
struct Completion : PendingLink {
  virtual void post(std::shared_ptr<StateBase<R>> st) noexcept = 0;

  /// The state's pointer to this completion (StateBase::completion).
  Completion** owner = nullptr;
  void orphan() noexcept override { *owner = nullptr; }

 protected:
  ~Completion() = default;
};

inline constexpr int kPending = 0;   ///< no outcome yet, no handler yet
inline constexpr int kReady = 1;     ///< the outcome is published
inline constexpr int kAttached = 2;  ///< a handler waits for the outcome

/// The part of an operation's state that does not depend on fn.
///
/// The outcome (error, result) is written by exactly one party: the op body
/// (run or skipped) or the cancellation handler, whichever wins `settled`.
/// The winner then publishes: `phase` kPending -> kReady. The initiation
/// attaches a handler: stores `completion`, then kPending -> kAttached. The
/// two meet on `phase` (acq_rel exchange / CAS): whoever comes second posts
/// the handler, so it runs exactly once, after the outcome is known.
template <class R>
struct StateBase {
  using storage_t = std::conditional_t<std::is_void_v<R>, bool, R>;

  std::atomic<int> phase{kPending};
  /// Outcome's winner decided (body run/skipped vs. cancellation). Written by
  /// exchange only; the winner alone writes error/result.
  std::atomic<bool> settled{false};
  /// The initiation ran (an operation may be started once).
  std::atomic<bool> started{false};
  const char* name = nullptr;
  std::exception_ptr error;         ///< outcome: fn's exception, the skip reason, or operation_aborted
  detail::ErrorRef error_ref;       ///< with `error`, when the engine stored it: observed by invoke()
  std::optional<storage_t> result;  ///< outcome on success (bool for void)
  /// Written by attach() before it publishes kAttached (release); read by the
  /// publisher after it sees kAttached (acquire). With a registry, only under
  /// its mutex: the context's shutdown clears it when it destroys the handler.
  Completion<R>* completion = nullptr;
  /// The registry of the handler's execution context, or null (untracked).
  /// Written by attach() before it publishes kAttached; read after.
  std::shared_ptr<PendingRegistry> registry;

  // The inline path (asio_inline.hpp). `timed` and `adaptive` are set by
  // push() before it pushes; `ran_inline` is set by the launcher inside that
  // push, on the pushing thread, and read by push() after it; `turn` is set
  // by push() before the handler can be attached and released by the upcall
  // (or the destructor), which the post orders after it.
  bool timed = false;       ///< fn's run time feeds its type's cost average
  bool adaptive = false;    ///< pushed as a launcher: fn runs where it is launched
  bool ran_inline = false;  ///< fn ran inside push(), on the pushing thread
  std::shared_ptr<std::atomic<int>> turn;  ///< IoTurn::pending counted for this op

  /// fn ran inline: count its completion as pending on the io_context.
  void hold_turn(std::shared_ptr<std::atomic<int>> t) noexcept {
    t->fetch_add(1, std::memory_order_relaxed);
    turn = std::move(t);
  }
  void release_turn() noexcept {
    if (turn) {
      turn->fetch_sub(1, std::memory_order_relaxed);
      turn.reset();
    }
  }

  StateBase() = default;
  StateBase(const StateBase&) = delete;
  StateBase& operator=(const StateBase&) = delete;
  virtual ~StateBase() {
    release_turn();
    // Attached but never published: cannot happen while the engine keeps its
    // promise to run or destroy every body; release the handler anyway (under
    // the registry's mutex: its context cannot shut down meanwhile).
    if (phase.load(std::memory_order_acquire) != kAttached) return;
    if (registry) {
      const std::lock_guard<std::recursive_mutex> lock(registry->mutex);
      if (Completion<R>* c = take_completion()) c->discard();
    } else if (completion != nullptr) {
      completion->discard();
    }
  }

  /// True if the caller decides the outcome.
  bool claim() noexcept { return !settled.exchange(true, std::memory_order_acq_rel); }

  /// Outcome written: hand it to the handler if one is attached.
  void publish(std::shared_ptr<StateBase> self) noexcept {
    if (phase.exchange(kReady, std::memory_order_acq_rel) == kAttached) post_completion(std::move(self));
  }

  /// Called by the initiation with the handler's completion and the registry
  /// of its executor's context (null: untracked).
  void attach(Completion<R>* c, std::shared_ptr<PendingRegistry> reg, std::shared_ptr<StateBase> self) noexcept {
    if (reg) {
      const std::lock_guard<std::recursive_mutex> lock(reg->mutex);
      if (!reg->add(c)) {
        // The context is being destroyed (a handler destroyed by its
        // shutdown started this operation): drop the handler now, while the
        // context is still there. The outcome, when published, goes nowhere.
        const char* op = c->name;
        c->discard();
        PendingRegistry::report_refused(op);
        return;
      }
      completion = c;
      c->owner = &completion;
      registry = std::move(reg);
    } else {
      completion = c;
    }
    int expected = kPending;
    if (!phase.compare_exchange_strong(expected, kAttached, std::memory_order_acq_rel, std::memory_order_acquire)) {
      post_completion(std::move(self));  // ready already: complete now (posted, never inline)
    }
  }

  /// Posts the attached handler, if its context has not dropped it.
  void post_completion(std::shared_ptr<StateBase> self) noexcept {
    if (!registry) {
      Completion<R>* c = std::exchange(completion, nullptr);
      c->post(std::move(self));
      return;
    }
    // Posting touches the context: under the mutex it cannot shut down
    // meanwhile. A local reference: the state may go with the posted upcall.
    const std::shared_ptr<PendingRegistry> reg = registry;
    const std::lock_guard<std::recursive_mutex> lock(reg->mutex);
    if (Completion<R>* c = take_completion()) c->post(std::move(self));
    // else the context shut down first and destroyed the handler (and said so)
  }

  /// The registered completion, unregistered, or null if the context's
  /// shutdown took it. Caller holds the registry's mutex.
  Completion<R>* take_completion() noexcept {
    Completion<R>* c = std::exchange(completion, nullptr);
    if (c != nullptr) registry->remove(c);
    return c;
  }

  /// Cancellation requested through the handler's slot (runs on the thread
  /// that emits the signal). Wins only before the op is granted.
  void cancel(std::shared_ptr<StateBase> self) noexcept {
    if (!claim()) return;  // the op was granted (or skipped) first: no effect
    error = std::make_exception_ptr(std::system_error(::asio::error::operation_aborted));
    publish(std::move(self));
  }

  /// The engine skipped the op (an input carries an error) or dropped it at
  /// shutdown: its body was destroyed without being called.
  void skipped(std::shared_ptr<StateBase> self) noexcept {
    if (!claim()) return;
    error_ref = detail::ErrorRef::skipping();
    error = error_ref.exception();
    if (!error) {
      try {
        error = std::make_exception_ptr(SkippedError(
            std::string("ordo::asio: ") +
            (name != nullptr ? std::string("op '") + name + "'" : std::string("an op")) +
            " was dropped by the engine before it ran (engine shut down)"));
      } catch (...) {
        error = std::current_exception();
      }
    }
    publish(std::move(self));
  }

  /// Calls the handler with the outcome (on the handler's executor).
  template <class Handler>
  void invoke(Handler& h) {
    error_ref.observe();  // handed to the handler: the engine's waits pass over it
    // The handler's alone from here: the state, released by whichever
    // thread drops it last (perhaps one the handler never synchronises
    // with), shares no exception with it.
    const detail::ErrorRef ref = std::move(error_ref);
    std::exception_ptr e = std::move(error);
    if constexpr (std::is_void_v<R>) {
      std::move(h)(std::move(e));
    } else if (e) {
      std::move(h)(std::move(e), R{});
    } else {
      std::move(h)(std::move(e), std::move(*result));
    }
  }
};

/// The state of one operation: its outcome plus fn (kept here, not in the op
/// record, so that the body fits the record's inline storage).
template <class F, class R>
struct State final : StateBase<R> {
  template <class G>
  explicit State(G&& g) : fn(std::forward<G>(g)) {}
  F fn;
};

/// The op body pushed to the engine. Runs fn (unless cancellation won),
/// completes the op, then publishes the outcome. Destroyed without having
/// been called: the engine skipped the op.
template <class F, class R>
struct Body {
  std::shared_ptr<State<F, R>> st;

  void operator()(const RunContext& rc, OnComplete done) noexcept {
    std::shared_ptr<State<F, R>> s = std::move(st);
    if (!s->claim()) {  // cancelled before the grant: a no-op in push order
      // Let go of the state first: whoever waits on the op's variables then
      // finds the state (and the exception_ptr it holds) already released
      // here, so this worker never frees what the handler's thread read.
      s.reset();
      try {
        done();
      } catch (...) {
      }
      return;
    }
    // Launched inside the push that took the inline path: fn runs here, on
    // the pushing io thread. Launched anywhere else (a worker that freed its
    // variables): fn runs there.
    if (s->adaptive && t_pushing == s.get()) s->ran_inline = true;
    const auto t0 = s->timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    try {
      if constexpr (std::is_void_v<R>) {
        detail::FnBody<F, R>::call(s->fn, rc);
        s->result.emplace(true);
      } else {
        s->result.emplace(detail::FnBody<F, R>::call(s->fn, rc));
      }
    } catch (...) {
      s->error = std::current_exception();
    }
    if (s->timed) record_cost<F>(std::chrono::steady_clock::now() - t0);
    try {
      if (s->error) {
        // Stored on the variables the op mutates, as for push_sync.
        s->error_ref = detail::ErrorRef::fail(done, s->error);
      } else {
        done();
      }
    } catch (...) {
    }
    s->publish(std::move(s));
  }

  explicit Body(std::shared_ptr<State<F, R>> s) noexcept : st(std::move(s)) {}
  Body(Body&&) noexcept = default;
  Body& operator=(Body&&) = delete;
  ~Body() {
    if (st) st->skipped(std::move(st));
  }
};

/// The function posted to the handler's executor: clears the cancellation
/// slot (on the handler's executor, where the signal is emitted), then calls
/// the handler with the outcome. Carries the handler's associated executor
/// and allocator for Asio to see.
template <class R, class Handler>
struct Upcall {
  Handler handler;
  std::shared_ptr<StateBase<R>> st;

  void operator()() {
    st->release_turn();  // this io_context's turn has come round to the inline run's completion
    auto slot = ::asio::get_associated_cancellation_slot(handler);
    if (slot.is_connected()) slot.clear();
    st->invoke(handler);
  }
};

/// The cancellation handler installed in the handler's slot.
template <class R>
struct CancelHandler {
  std::shared_ptr<StateBase<R>> st;
  void operator()(::asio::cancellation_type type) const {
    if ((type & (::asio::cancellation_type::terminal | ::asio::cancellation_type::partial |
                 ::asio::cancellation_type::total)) != ::asio::cancellation_type::none) {
      st->cancel(st);
    }
  }
};

/// Outstanding work on a handler's executor while its operation is pending:
/// a tracked copy of a standard executor (prefer outstanding_work.tracked),
/// or an executor_work_guard for an old-style (Networking TS) executor.
template <class Ex, class = void>
struct Work {
  using type = ::asio::executor_work_guard<Ex>;
  static type make(const Ex& ex) { return type(ex); }
  static Ex executor(const type& w) { return w.get_executor(); }
};
template <class Ex>
struct Work<Ex, std::enable_if_t<::asio::execution::is_executor<Ex>::value>> {
  using type = std::decay_t<decltype(::asio::prefer(std::declval<const Ex&>(), ::asio::execution::outstanding_work.tracked))>;
  static type make(const Ex& ex) { return ::asio::prefer(ex, ::asio::execution::outstanding_work.tracked); }
  static const type& executor(const type& w) { return w; }
};

/// Completion<R> for a concrete handler type.
template <class R, class Handler>
class HandlerCompletion final : public Completion<R> {
 public:
  using executor_type = ::asio::associated_executor_t<Handler, ::asio::system_executor>;
  using allocator_type = ::asio::associated_allocator_t<Handler, std::allocator<void>>;
  using self_alloc = typename std::allocator_traits<allocator_type>::template rebind_alloc<HandlerCompletion>;

  static HandlerCompletion* make(Handler&& h) {
    self_alloc a(::asio::get_associated_allocator(h, std::allocator<void>{}));
    HandlerCompletion* p = std::allocator_traits<self_alloc>::allocate(a, 1);
    try {
      std::allocator_traits<self_alloc>::construct(a, p, std::move(h), a);
    } catch (...) {
      std::allocator_traits<self_alloc>::deallocate(a, p, 1);
      throw;
    }
    return p;
  }
  HandlerCompletion(Handler&& h, const self_alloc& a)
      : handler_(std::move(h)),
        alloc_(a),
        work_(Work<executor_type>::make(::asio::get_associated_executor(handler_, ::asio::system_executor{}))) {}

  void post(std::shared_ptr<StateBase<R>> st) noexcept override {
    Handler h(std::move(handler_));
    typename Work<executor_type>::type work(std::move(work_));
    destroy();
    const allocator_type alloc = ::asio::get_associated_allocator(h, std::allocator<void>{});
    // post, never dispatch: the handler must not run on the engine worker that
    // completed the op (unless the handler's executor is that worker pool),
    // nor inside the initiating function, nor inside a cancellation emit.
    // The posted upcall is outstanding work of its own; `work` ends here.
    ::asio::post(Work<executor_type>::executor(work),
                 ::asio::bind_allocator(alloc, Upcall<R, Handler>{std::move(h), std::move(st)}));
  }
  void discard() noexcept override { destroy(); }  // the context is alive: see PendingLink

 private:
  void destroy() noexcept {
    self_alloc a(alloc_);  // handler_ may be moved-from here
    std::allocator_traits<self_alloc>::destroy(a, this);
    std::allocator_traits<self_alloc>::deallocate(a, this, 1);
  }

  Handler handler_;
  self_alloc alloc_;
  typename Work<executor_type>::type work_;
};

/// The initiation passed to asio::async_initiate. The op was pushed already
/// (eager registration); starting the Asio operation only attaches the
/// handler. Copyable (asio::deferred may copy it); started at most once.
template <class R>
struct Initiation {
  std::shared_ptr<StateBase<R>> st;

  template <class Handler>
  void operator()(Handler&& handler) const {
    if (st->started.exchange(true, std::memory_order_acq_rel)) {
      throw Error(Errc::invalid_argument,
                  "ordo::asio: an operation was started twice (a deferred operation was launched again): "
                  "each ordo::asio::push / wait_for runs its op once and has one outcome");
    }
    using H = std::decay_t<Handler>;
    H h(std::forward<Handler>(handler));
    const auto ex = ::asio::get_associated_executor(h, ::asio::system_executor{});
    note_io_thread(ex);
    if (st->phase.load(std::memory_order_acquire) == kReady) {
      // The outcome is published already (fn ran inline inside push, or the
      // op finished before the operation was started) and nothing else will
      // touch the state: no pending-handler record, work guard or
      // cancellation handler is needed. Post the upcall (never inline).
      const auto alloc = ::asio::get_associated_allocator(h, std::allocator<void>{});
      ::asio::post(ex, ::asio::bind_allocator(alloc, Upcall<R, H>{std::move(h), st}));
      return;
    }
    // Where the handler is registered until it is posted (see
    // asio_pending.hpp): its context's destructor destroys it if the op has
    // not completed by then.
    std::shared_ptr<PendingRegistry> reg = pending_registry_of(ex);
    auto slot = ::asio::get_associated_cancellation_slot(h);
    if (slot.is_connected()) slot.template emplace<CancelHandler<R>>(CancelHandler<R>{st});
    HandlerCompletion<R, H>* c = nullptr;
    try {
      c = HandlerCompletion<R, H>::make(std::move(h));
    } catch (...) {
      if (slot.is_connected()) slot.clear();
      throw;
    }
    c->name = st->name;
    st->attach(c, std::move(reg), st);
  }
};

}  // namespace ordo::asio_detail
