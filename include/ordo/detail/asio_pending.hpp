// ordo/detail/asio_pending.hpp - the handlers ordo::asio holds for each
// execution context (an io_context, ...), and what becomes of them when the
// context is destroyed first. Internal (docs/asio.md, "Lifetime").
//
// A pending handler holds its executor, with outstanding work on it, until
// its op completes and the handler is posted; if the io_context is destroyed
// first, posting to it, even releasing that work, touches freed memory. So
// each execution context with pending handlers gets a PendingService, whose
// shutdown() the context's destructor calls while the context is still whole
// (services shut down newest first, so before the io_context's scheduler): it
// destroys the pending handlers without calling them, as Asio does with its
// own, says so on stderr, and closes the registry. Posting and closing
// exclude each other on the registry's mutex, so a completion racing the
// destructor either posts first or finds its handler gone.
#pragma once

#include <asio/execution.hpp>
#include <asio/execution_context.hpp>
#include <asio/query.hpp>

#include <cstddef>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

namespace ordo::asio_detail {

/// One pending handler, as a node of its context's registry.
struct PendingLink {
  /// Neighbours in the registry's list; guarded by the registry's mutex.
  PendingLink* prev = nullptr;
  PendingLink* next = nullptr;
  /// The op's name (OpAttrs::name, may be null), for the message.
  const char* name = nullptr;

  /// The context is going: the op's state forgets this handler, so its
  /// completion will find none to post. Called under the registry's mutex.
  virtual void orphan() noexcept = 0;
  /// Destroys the handler and the work it holds, then this object, without
  /// calling the handler. Called while the context is still alive.
  virtual void discard() noexcept = 0;

 protected:
  ~PendingLink() = default;
};

/// The pending handlers of one execution context. Shared by the context's
/// PendingService and the op states whose handlers it holds, so a state that
/// completes after the context is gone still finds the (closed) registry.
///
/// @par Thread safety
/// `mutex` guards the list, `closed_` and, in each op state whose handler is
/// registered, the pointer to it. It is recursive: a handler or executor
/// destroyed under it may start or release another operation on the same
/// context (the last copy of an executor that owns its context, such as
/// engine_executor, even shuts the context down from there).
class PendingRegistry {
 public:
  std::recursive_mutex mutex;

  /// Registers a pending handler; false (and not registered) once the
  /// context has begun shutting down. Caller holds `mutex`.
  bool add(PendingLink* l) noexcept {
    if (closed_) return false;
    l->prev = nullptr;
    l->next = head_;
    if (head_ != nullptr) head_->prev = l;
    head_ = l;
    return true;
  }
  /// Unregisters a handler taken for posting or discarding. Caller holds `mutex`.
  void remove(PendingLink* l) noexcept {
    if (l->prev != nullptr) {
      l->prev->next = l->next;
    } else {
      head_ = l->next;
    }
    if (l->next != nullptr) l->next->prev = l->prev;
    l->prev = l->next = nullptr;
  }

  /// The context is shutting down: destroys every pending handler (the
  /// context is still alive) and refuses new ones. Reports them on stderr.
  void close() noexcept {
    PendingLink* list = nullptr;
    {
      const std::lock_guard<std::recursive_mutex> lock(mutex);
      closed_ = true;
      list = std::exchange(head_, nullptr);
      for (PendingLink* l = list; l != nullptr; l = l->next) l->orphan();
    }
    // Orphaned: no other thread reaches these handlers any more, so they are
    // destroyed without the mutex held. Destroying one may run user code
    // that posts to this context or starts another operation on it; both
    // are fine here (the latter is refused: closed).
    PendingLink* last = list;
    while (last != nullptr && last->next != nullptr) last = last->next;
    std::size_t count = 0;
    std::string names;
    while (last != nullptr) {  // oldest first (add() prepends)
      PendingLink* prev = last->prev;
      if (count < kNamesShown) append_name(names, last->name);
      ++count;
      last->discard();
      last = prev;
    }
    if (count > 0) report(count, names);
  }

  /// A handler attached while the context was shutting down: destroyed at once.
  static void report_refused(const char* name) noexcept {
    std::string n;
    append_name(n, name);
    std::fprintf(stderr,
                 "ordo::asio: the handler of %s was attached to an execution context (io_context) that is being "
                 "destroyed: it is destroyed without being called; the op itself is not cancelled by this\n",
                 n.c_str());
  }

 private:
  static constexpr std::size_t kNamesShown = 8;

  static void append_name(std::string& out, const char* name) noexcept {
    try {
      if (!out.empty()) out += ", ";
      if (name != nullptr) {
        out += "op '";
        out += name;
        out += "'";
      } else {
        out += "an unnamed op";
      }
    } catch (...) {  // out of memory: the message names fewer ops
    }
  }

  static void report(std::size_t count, const std::string& names) noexcept {
    const bool one = count == 1;
    std::fprintf(stderr,
                 "ordo::asio: an execution context (io_context) was destroyed while %zu ordo::asio operation%s had %s "
                 "pending on it (%s%s): %s destroyed without being called, as Asio does with the handlers of its own "
                 "pending operations; the ops themselves are not cancelled by this. To have handlers run, destroy "
                 "the io_context only after the ops complete (declare it before the engine, whose destructor "
                 "drains them)\n",
                 count, one ? "" : "s", one ? "a handler" : "handlers", names.c_str(), count > kNamesShown ? ", ..." : "",
                 one ? "it is" : "they are");
  }

  bool closed_ = false;           ///< guarded by mutex: set once, by close()
  PendingLink* head_ = nullptr;  ///< guarded by mutex
};

/// The execution_context service that owns a context's PendingRegistry.
class PendingService final : public ::asio::execution_context::service {
 public:
  static inline ::asio::execution_context::id id;
  explicit PendingService(::asio::execution_context& ctx)
      : ::asio::execution_context::service(ctx), registry_(std::make_shared<PendingRegistry>()) {}
  [[nodiscard]] const std::shared_ptr<PendingRegistry>& registry() const noexcept { return registry_; }

 private:
  void shutdown() override { registry_->close(); }
  std::shared_ptr<PendingRegistry> registry_;
};

/// The execution context of executor `ex` (io_context, system_context,
/// thread_pool, ... through strands and any_io_executor), or null if it
/// names none.
template <class Ex>
::asio::execution_context* execution_context_of(const Ex& ex) noexcept {
  if constexpr (::asio::execution::is_executor<Ex>::value) {
    if constexpr (::asio::can_query<const Ex&, ::asio::execution::context_t>::value) {
      using C = decltype(::asio::query(ex, ::asio::execution::context));
      if constexpr (std::is_convertible_v<C, ::asio::execution_context&>) {
        return &static_cast<::asio::execution_context&>(::asio::query(ex, ::asio::execution::context));
      }
    }
    return nullptr;
  } else if constexpr (requires { ex.context(); }) {  // a Networking TS executor
    if constexpr (std::is_convertible_v<decltype(ex.context()), ::asio::execution_context&>) {
      return &static_cast<::asio::execution_context&>(ex.context());
    }
    return nullptr;
  } else {
    return nullptr;
  }
}

/// The registry of the context of `ex` (created with its service on first
/// use), or null if `ex` names no context: its handlers are then not
/// tracked. Throws what asio::use_service throws (bad_alloc).
template <class Ex>
std::shared_ptr<PendingRegistry> pending_registry_of(const Ex& ex) {
  ::asio::execution_context* ctx = execution_context_of(ex);
  if (ctx == nullptr) return nullptr;
  return ::asio::use_service<PendingService>(*ctx).registry();
}

}  // namespace ordo::asio_detail
