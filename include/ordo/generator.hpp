// ordo/generator.hpp - AsyncGenerator<T>: a coroutine that co_yields values
// and may co_await between them; its consumer co_awaits each value.
//
//   ordo::AsyncGenerator<std::string> lines(ordo::Engine& e, ordo::Var file) {
//     for (...) {
//       std::string line = co_await ordo::push(e, ordo::reads(file), ordo::writes(), [&] { return next(); });
//       co_yield std::move(line);
//     }
//   }
//   auto gen = lines(engine, file);
//   while (std::optional<std::string> line = co_await gen.next()) use(*line);
//
// When the body runs, and where: class AsyncGenerator below.
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "ordo/detail/coro_runtime.hpp"
#include "ordo/error.hpp"

namespace ordo {

/// A lazy asynchronous sequence of T (move-constructible). Move-only; owns
/// the coroutine frame. Destroy it only while no next() is pending (between
/// values, or after the end); destroying it there destroys the body,
/// running the destructors of its locals.
///
/// Lazy: the body starts at the first next() and runs up to each co_yield;
/// next() yields std::nullopt once the body has returned, and rethrows an
/// exception the body let escape. The body runs on the thread of the next()
/// that resumed it, then wherever its own awaits resume it; the consumer
/// continues where the body yields (symmetric transfer, bounded stack).
///
/// @par Thread safety
/// One consumer: next() is awaited by one coroutine at a time, the next
/// call after the previous one resumed. The consumer sees everything the
/// body wrote before the co_yield of the value it gets.
template <class T>
class [[nodiscard]] AsyncGenerator {
  static_assert(!std::is_reference_v<T>, "AsyncGenerator<T&> is not supported: yield pointers or values");

 public:
  struct promise_type : detail::FrameAllocated {
    std::optional<T> value;
    std::exception_ptr error;
    std::coroutine_handle<> consumer;

    AsyncGenerator get_return_object() noexcept {
      return AsyncGenerator(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() const noexcept { return {}; }
    /// Hands control back to the consumer that awaits next().
    struct ToConsumer {
      bool await_ready() const noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) const noexcept {
        return detail::transfer(h.promise().consumer);
      }
      void await_resume() const noexcept {}
    };
    ToConsumer final_suspend() const noexcept { return {}; }
    template <class U = T>
      requires std::is_constructible_v<T, U&&>
    ToConsumer yield_value(U&& v) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
      value.emplace(std::forward<U>(v));
      return {};
    }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { error = std::current_exception(); }
  };

  AsyncGenerator() noexcept = default;
  AsyncGenerator(AsyncGenerator&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  AsyncGenerator& operator=(AsyncGenerator&& o) noexcept {
    if (this != &o) {
      if (h_) h_.destroy();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  AsyncGenerator(const AsyncGenerator&) = delete;
  AsyncGenerator& operator=(const AsyncGenerator&) = delete;
  ~AsyncGenerator() {
    if (h_) h_.destroy();
  }

  /// `co_await gen.next()`: the next value, std::nullopt at the end.
  struct NextAwaiter {
    std::coroutine_handle<promise_type> h;
    bool await_ready() const noexcept { return !h || h.done(); }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> consumer) const noexcept {
      h.promise().consumer = consumer;
      return detail::transfer(h);
    }
    std::optional<T> await_resume() const {
      if (!h) throw Error(Errc::invalid_argument, "next() on an empty AsyncGenerator");
      promise_type& p = h.promise();
      if (p.error) std::rethrow_exception(std::exchange(p.error, nullptr));
      if (h.done()) return std::nullopt;
      std::optional<T> out(std::move(p.value));
      p.value.reset();
      return out;
    }
  };
  [[nodiscard]] NextAwaiter next() noexcept { return NextAwaiter{h_}; }
  /// False for a default-constructed or moved-from generator.
  [[nodiscard]] bool valid() const noexcept { return static_cast<bool>(h_); }

 private:
  explicit AsyncGenerator(std::coroutine_handle<promise_type> h) noexcept : h_(h) {}
  std::coroutine_handle<promise_type> h_;
};

}  // namespace ordo
