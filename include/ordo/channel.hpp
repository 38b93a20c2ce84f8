// ordo/channel.hpp - a bounded multi-producer multi-consumer channel.
//
//   ordo::Channel<Record> ch(64);                      // holds up to 64 values
//   // producer (a coroutine)
//   co_await ch.send(std::move(r));                    // suspends while full (backpressure)
//   ch.close();                                        // no more values
//   // consumer (a coroutine): the loop ends once the channel is closed and drained
//   while (std::optional<Record> r = co_await ch.receive()) use(*r);
//   // from a plain op (never blocks)
//   if (!ch.try_send(std::move(r))) { /* full or closed: r is untouched */ }
//
// Order, wake-ups, close() and cancellation: class Channel below;
// docs/coroutines.md, "Channels".
#pragma once

#include <cstddef>
#include <coroutine>
#include <deque>
#include <mutex>
#include <optional>
#include <stop_token>
#include <type_traits>
#include <utility>

#include "ordo/coro.hpp"
#include "ordo/detail/wait_list.hpp"
#include "ordo/error.hpp"

namespace ordo {

/// A bounded MPMC channel of T (move-constructible). It must outlive every
/// waiter.
///
/// Values are delivered in FIFO order per channel (one total order of sends,
/// the order in which they entered the channel). A receiver waiting on an
/// empty channel gets the next value directly from the sender, and a sender
/// waiting on a full one moves its value in when a receiver makes room; the
/// coroutine woken that way resumes on the thread of the send, receive or
/// close that woke it (through that thread's trampoline: inline where no
/// coroutine runs there, else once the running one suspends). A plain op
/// calling try_send / try_receive may therefore resume a waiting coroutine
/// inside its own body; push the work that coroutine does as ops of its own
/// if that matters.
///
/// close(): later sends throw ordo::Error{Errc::closed} (try_send returns
/// false); values already in the channel are still received; waiting senders
/// throw Errc::closed (their values are dropped); receivers get std::nullopt
/// once the channel is empty. send / receive take a std::stop_token: a stop
/// before the operation completes resumes the waiter at once with
/// ordo::CancelledError (a sender's value is not sent).
///
/// @par Thread safety
/// Every member may be called from any thread or coroutine, concurrently.
/// A send happens-before the receive that gets its value.
template <class T>
class Channel {
  static_assert(std::is_move_constructible_v<T>, "Channel<T> needs a move-constructible T");
  using Node = detail::WaitNode;
  using Outcome = detail::WaitNode::Outcome;

 public:
  /// A channel holding up to `capacity` values (at least 1).
  explicit Channel(std::size_t capacity) : capacity_(capacity) {
    if (capacity == 0) throw Error(Errc::invalid_argument, "Channel: capacity must be at least 1");
  }
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel() = default;

  class [[nodiscard]] SendAwaiter {
   public:
    SendAwaiter(Channel& c, T&& v, std::stop_token stop) : c_(&c), value_(std::move(v)), stop_(std::move(stop)) {}
    SendAwaiter(const SendAwaiter&) = delete;
    SendAwaiter& operator=(const SendAwaiter&) = delete;
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h) {
      if (stop_.stop_requested()) {
        node_.outcome = Outcome::cancelled;
        return false;
      }
      Node* woken = nullptr;
      bool queued = false;  // once queued, node_ is the completer's to write: not read here again
      {
        std::lock_guard lock(c_->m_);
        if (c_->closed_) {
          node_.outcome = Outcome::closed;
          return false;
        }
        const std::size_t before = c_->buf_.size();
        woken = c_->offer_locked(value_);
        if (woken != nullptr || c_->buf_.size() != before) {
          node_.outcome = Outcome::granted;
        } else {
          c_->wait_locked(c_->senders_, node_, &value_, &Channel::cancel_waiter<true>);
          queued = true;
        }
      }
      return finish_suspend(node_, woken, queued, h, stop_);
    }
    void await_resume() {
      node_.disarm();
      switch (node_.outcome) {
        case Outcome::granted: return;
        case Outcome::closed: throw Error(Errc::closed, "ordo: Channel::send on a closed channel");
        default: throw CancelledError("ordo: Channel::send cancelled before the value entered the channel");
      }
    }

   private:
    friend class Channel;
    Channel* c_;
    T value_;
    std::stop_token stop_;
    Node node_;
  };

  class [[nodiscard]] ReceiveAwaiter {
   public:
    ReceiveAwaiter(Channel& c, std::stop_token stop) noexcept : c_(&c), stop_(std::move(stop)) {}
    ReceiveAwaiter(const ReceiveAwaiter&) = delete;
    ReceiveAwaiter& operator=(const ReceiveAwaiter&) = delete;
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h) {
      if (stop_.stop_requested()) {
        node_.outcome = Outcome::cancelled;
        return false;
      }
      Node* woken = nullptr;
      bool queued = false;  // once queued, node_ is the completer's to write: not read here again
      {
        std::lock_guard lock(c_->m_);
        if (c_->take_locked(out_, woken)) {
          node_.outcome = Outcome::granted;
        } else if (c_->closed_) {
          node_.outcome = Outcome::closed;
        } else {
          c_->wait_locked(c_->receivers_, node_, &out_, &Channel::cancel_waiter<false>);
          queued = true;
        }
      }
      return finish_suspend(node_, woken, queued, h, stop_);
    }
    /// The next value, or std::nullopt once the channel is closed and empty.
    std::optional<T> await_resume() {
      node_.disarm();
      if (node_.outcome == Outcome::cancelled) {
        throw CancelledError("ordo: Channel::receive cancelled before a value arrived");
      }
      return std::move(out_);
    }

   private:
    Channel* c_;
    std::stop_token stop_;
    std::optional<T> out_;
    Node node_;
  };

  /// `co_await ch.send(v)`: puts v in the channel, suspending while it is
  /// full. Throws Errc::closed if the channel is (or gets) closed first.
  [[nodiscard]] SendAwaiter send(T value, std::stop_token stop = {}) {
    return SendAwaiter(*this, std::move(value), std::move(stop));
  }
  /// `co_await ch.receive()`: the next value, suspending while the channel
  /// is empty; std::nullopt once it is closed and empty.
  [[nodiscard]] ReceiveAwaiter receive(std::stop_token stop = {}) noexcept {
    return ReceiveAwaiter(*this, std::move(stop));
  }

  /// Puts `value` in the channel if there is room (or a waiting receiver),
  /// without waiting; moves from it only then. False if full or closed.
  bool try_send(T&& value) {
    Node* woken = nullptr;
    {
      std::lock_guard lock(m_);
      if (closed_) return false;
      const std::size_t before = buf_.size();
      woken = offer_locked(value);
      if (woken == nullptr && buf_.size() == before) return false;
    }
    if (woken != nullptr) woken->settle(Outcome::granted);
    return true;
  }
  bool try_send(const T& value) {
    T copy(value);
    return try_send(std::move(copy));
  }
  /// The next value if there is one, without waiting (std::nullopt if empty,
  /// closed or not; see closed()).
  std::optional<T> try_receive() {
    std::optional<T> out;
    Node* woken = nullptr;
    {
      std::lock_guard lock(m_);
      if (!take_locked(out, woken)) return std::nullopt;
    }
    if (woken != nullptr) woken->settle(Outcome::granted);
    return out;
  }

  /// Closes the channel (idempotent). See the header comment.
  void close() noexcept {
    detail::SettleList woken;
    {
      std::lock_guard lock(m_);
      if (closed_) return;
      closed_ = true;
      while (Node* n = senders_.pop_front()) woken.push_back(n);
      while (Node* n = receivers_.pop_front()) woken.push_back(n);  // only while empty: none hold values
    }
    woken.settle_all(Outcome::closed);
  }
  [[nodiscard]] bool closed() const noexcept {
    std::lock_guard lock(m_);
    return closed_;
  }
  /// Values in the channel now (a snapshot).
  [[nodiscard]] std::size_t size() const noexcept {
    std::lock_guard lock(m_);
    return buf_.size();
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

 private:
  /// Under m_: queues `node` (its value's slot, its cancel) on `list`.
  void wait_locked(detail::WaitList& list, Node& node, void* slot, void (*cancel)(void*, Node*) noexcept) noexcept {
    node.slot = slot;
    node.owner = this;
    node.cancel = cancel;
    list.push_back(&node);
  }
  /// After m_: settles the peer this operation completed, and suspends if
  /// `node` was queued (unless settled meanwhile).
  static bool finish_suspend(Node& node, Node* woken, bool queued, std::coroutine_handle<> h,
                             const std::stop_token& stop) noexcept {
    if (woken != nullptr) woken->settle(Outcome::granted);
    if (!queued) return false;
    return node.arm(h, stop);
  }
  /// Under m_, not closed: hands `value` to the first waiting receiver
  /// (returned, to settle outside the lock) or appends it to the buffer if
  /// there is room (then returns null and the buffer grew). Neither: no change.
  Node* offer_locked(T& value) {
    if (Node* r = receivers_.pop_front()) {  // receivers wait only while the buffer is empty
      static_cast<std::optional<T>*>(r->slot)->emplace(std::move(value));
      return r;
    }
    if (buf_.size() < capacity_) buf_.push_back(std::move(value));
    return nullptr;
  }
  /// Under m_: takes the oldest value into `out` (and, if a sender waits,
  /// moves its value into the freed room: `woken` is that sender). False
  /// if the channel is empty.
  bool take_locked(std::optional<T>& out, Node*& woken) {
    if (buf_.empty()) return false;
    out.emplace(std::move(buf_.front()));
    buf_.pop_front();
    if (Node* s = senders_.pop_front()) {
      buf_.push_back(std::move(*static_cast<T*>(s->slot)));
      woken = s;
    }
    return true;
  }
  template <bool Sender>
  static void cancel_waiter(void* owner, Node* node) noexcept {
    auto* c = static_cast<Channel*>(owner);
    {
      std::lock_guard lock(c->m_);
      if (!node->linked) return;  // completed first
      (Sender ? c->senders_ : c->receivers_).unlink(node);
    }
    node->settle(Outcome::cancelled);
  }

  const std::size_t capacity_;
  mutable std::mutex m_;
  std::deque<T> buf_;           ///< oldest first; guarded by m_
  bool closed_ = false;         ///< guarded by m_
  detail::WaitList senders_;    ///< waiting while the buffer is full; guarded by m_
  detail::WaitList receivers_;  ///< waiting while the buffer is empty; guarded by m_
};

}  // namespace ordo
