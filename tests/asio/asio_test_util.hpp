// tests/asio/asio_test_util.hpp - helpers shared by the ordo::asio tests.
#pragma once

#include <asio.hpp>

#include <atomic>
#include <cstddef>
#include <exception>
#include <future>
#include <new>
#include <stdexcept>
#include <thread>
#include <utility>

#include <ordo/asio.hpp>

namespace ordo_asio_test {

/// Engine options for tests: small pools, and unobserved errors counted
/// instead of printed (tests that fail ops on purpose check them).
inline ordo::Options test_options(unsigned workers = 2) {
  ordo::Options o;
  o.kind = ordo::EngineKind::pooled;
  o.cpu_workers = workers;
  o.on_unobserved_error = [](const ordo::ErrorReport&) {};
  return o;
}

/// An io_context run by one thread for the life of the object.
class IoThread {
 public:
  IoThread() : guard_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }), id_(thread_.get_id()) {}
  ~IoThread() {
    guard_.reset();
    thread_.join();
  }
  asio::io_context& io() { return io_; }
  [[nodiscard]] std::thread::id id() const { return id_; }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::thread::id id_;
};

/// Runs coroutine `make()` on `io` (io_context run on this thread) and
/// returns its result; rethrows its exception.
template <class Make>
auto run_coro(asio::io_context& io, Make make) {
  auto fut = asio::co_spawn(io, make(), asio::use_future);
  io.run();
  io.restart();
  return fut.get();
}

/// A gate an op can block on: open() releases every waiter.
class Gate {
 public:
  void open() { p_.set_value(); }
  void wait() const { f_.wait(); }

 private:
  std::promise<void> p_;
  std::shared_future<void> f_{p_.get_future().share()};
};

/// An allocator that counts what is live (for associated-allocator tests).
struct AllocStats {
  std::atomic<int> allocations{0};
  std::atomic<int> live{0};
};
template <class T>
struct CountingAllocator {
  using value_type = T;
  AllocStats* stats;
  explicit CountingAllocator(AllocStats* s) noexcept : stats(s) {}
  template <class U>
  CountingAllocator(const CountingAllocator<U>& o) noexcept : stats(o.stats) {}  // NOLINT
  T* allocate(std::size_t n) {
    stats->allocations.fetch_add(1);
    stats->live.fetch_add(1);
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t) noexcept {
    stats->live.fetch_sub(1);
    ::operator delete(p);
  }
  template <class U>
  bool operator==(const CountingAllocator<U>& o) const noexcept { return stats == o.stats; }
  template <class U>
  bool operator!=(const CountingAllocator<U>& o) const noexcept { return stats != o.stats; }
};

}  // namespace ordo_asio_test
