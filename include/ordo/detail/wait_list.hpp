// ordo/detail/wait_list.hpp - the suspended coroutines of a Semaphore or a
// Channel: an intrusive FIFO of waiter nodes, and the hand-shake that lets
// a waiter be completed (granted, cancelled, closed) by any thread while it
// is still suspending. Internal (see ordo/semaphore.hpp, ordo/channel.hpp).
#pragma once

#include <atomic>
#include <coroutine>
#include <optional>
#include <stop_token>

#include "ordo/detail/coro_runtime.hpp"

namespace ordo::detail {

struct WaitNode;

/// The stop callback of a waiter: asks its owner to cancel it.
struct WaitCancel {
  WaitNode* node;
  void operator()() const noexcept;
};

/// One suspended (or suspending) coroutine. Lives in the awaiter, in the
/// coroutine's frame. Linked into its owner's list under the owner's lock;
/// whoever unlinks it (a grant, a close, the stop callback) completes it.
///
/// The hand-shake: `state` starts at kArming while the awaiter registers
/// its stop callback; the completer sets `outcome`, then exchanges `state`
/// to kSettled and resumes the coroutine only if it saw kSuspended; the
/// awaiter exchanges it to kSuspended last and does not suspend if it saw
/// kSettled. acq_rel on both sides: the resumed coroutine sees `outcome`
/// and whatever the completer wrote before (a channel's value).
struct WaitNode {
  static constexpr int kArming = 0;
  static constexpr int kSuspended = 1;
  static constexpr int kSettled = 2;

  enum class Outcome : unsigned char { none, granted, cancelled, closed };

  WaitNode* prev = nullptr;  ///< guarded by the owner's lock
  WaitNode* next = nullptr;  ///< guarded by the owner's lock
  bool linked = false;       ///< in the owner's list; guarded by the owner's lock
  Outcome outcome = Outcome::none;  ///< written by the completer before `state`
  void* slot = nullptr;      ///< a channel's value (send: the source; receive: the destination)
  std::coroutine_handle<> h;
  std::atomic<int> state{kArming};
  /// The owner's cancel: unlinks the node if it is still linked, then settles it.
  void (*cancel)(void* owner, WaitNode* node) noexcept = nullptr;
  void* owner = nullptr;
  std::optional<std::stop_callback<WaitCancel>> on_stop;

  /// Completer side, after unlinking the node (outside the owner's lock).
  void settle(Outcome o) noexcept {
    outcome = o;
    if (state.exchange(kSettled, std::memory_order_acq_rel) == kSuspended) resume(h);
  }
  /// Awaiter side, from await_suspend after linking: registers the stop
  /// callback (a token stopped already cancels here) and reports whether
  /// the coroutine stays suspended.
  bool arm(std::coroutine_handle<> handle, const std::stop_token& stop) noexcept {
    h = handle;
    if (stop.stop_possible()) on_stop.emplace(stop, WaitCancel{this});
    return state.exchange(kSuspended, std::memory_order_acq_rel) != kSettled;
  }
  /// Awaiter side, in await_resume: a stop from now on has no effect (waits
  /// for a callback running on another thread, which does not block).
  void disarm() noexcept { on_stop.reset(); }
};

inline void WaitCancel::operator()() const noexcept { node->cancel(node->owner, node); }

/// FIFO of WaitNodes; every member is called under the owner's lock.
class WaitList {
 public:
  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }
  void push_back(WaitNode* n) noexcept {
    n->next = nullptr;
    n->prev = tail_;
    if (tail_ != nullptr) {
      tail_->next = n;
    } else {
      head_ = n;
    }
    tail_ = n;
    n->linked = true;
  }
  WaitNode* pop_front() noexcept {
    WaitNode* n = head_;
    if (n != nullptr) unlink(n);
    return n;
  }
  [[nodiscard]] WaitNode* front() const noexcept { return head_; }
  void unlink(WaitNode* n) noexcept {
    if (n->prev != nullptr) {
      n->prev->next = n->next;
    } else {
      head_ = n->next;
    }
    if (n->next != nullptr) {
      n->next->prev = n->prev;
    } else {
      tail_ = n->prev;
    }
    n->prev = n->next = nullptr;
    n->linked = false;
  }

 private:
  WaitNode* head_ = nullptr;
  WaitNode* tail_ = nullptr;
};

/// Nodes unlinked from their owner's list under its lock, settled once the
/// lock is released. Chained through `next` only: `linked` stays false, so a
/// stop callback that runs meanwhile sees them completed and leaves them
/// alone (a WaitList here would mark them linked again, and the callback
/// would unlink them from the owner's list, which no longer holds them).
class SettleList {
 public:
  /// Under the owner's lock, after the node was unlinked.
  void push_back(WaitNode* n) noexcept {
    n->next = nullptr;
    if (tail_ != nullptr) {
      tail_->next = n;
    } else {
      head_ = n;
    }
    tail_ = n;
  }
  /// After the lock: settles every node in order (a settled node may be
  /// destroyed at once, so its successor is read first).
  void settle_all(WaitNode::Outcome o) noexcept {
    for (WaitNode* n = head_; n != nullptr;) {
      WaitNode* next = n->next;
      n->settle(o);
      n = next;
    }
    head_ = tail_ = nullptr;
  }

 private:
  WaitNode* head_ = nullptr;
  WaitNode* tail_ = nullptr;
};

}  // namespace ordo::detail
