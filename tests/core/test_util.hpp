// tests/core/test_util.hpp - helpers shared by the core tests.
#pragma once

#include <climits>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ordo/ordo.hpp"

namespace ordo::test {

/// Sanitizer builds run smaller sizes where a test is about volume, not logic.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr int kScale = 4;
#else
inline constexpr int kScale = 1;
#endif

/// A gate threads wait on until the test opens it. Waits are bounded (a
/// broken engine fails the test instead of hanging it); nothing sleeps.
class Gate {
 public:
  void open() {
    std::lock_guard lock(m_);
    open_ = true;
    cv_.notify_all();
  }
  /// Returns false if not opened within `limit`.
  bool wait(std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    std::unique_lock lock(m_);
    return cv_.wait_for(lock, limit, [this] { return open_; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

/// Sets (or, given nullptr, unsets) an environment variable for one scope
/// and restores what was there before, so a failed assertion in an env test
/// does not leak the variable into the tests after it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr) old_ = old;
    set(value);
  }
  ~ScopedEnv() { set(old_ ? old_->c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const char* value) const {
    if (value == nullptr) {
      ::unsetenv(name_.c_str());
    } else {
      ::setenv(name_.c_str(), value, 1);
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

/// Counts arrivals; wait_for(n) blocks until n have arrived (bounded).
class Counter {
 public:
  void arrive() {
    std::lock_guard lock(m_);
    ++n_;
    cv_.notify_all();
  }
  bool wait_for(int n, std::chrono::seconds limit = std::chrono::seconds(60)) {
    std::unique_lock lock(m_);
    return cv_.wait_for(lock, limit, [&] { return n_ >= n; });
  }
  int value() {
    std::lock_guard lock(m_);
    return n_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_ = 0;
};

/// Seed for a randomized test: ORDO_TEST_SEED if set, else fresh; always printed.
inline std::uint64_t test_seed(const char* what) {
  std::uint64_t seed = 0;
  if (const char* s = std::getenv("ORDO_TEST_SEED"); s != nullptr) {
    seed = std::strtoull(s, nullptr, 10);
  } else {
    seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  std::cout << "[ seed     ] " << what << " seed=" << seed << " (rerun with ORDO_TEST_SEED=" << seed << ")\n";
  ::testing::Test::RecordProperty(std::string("seed_") + what, std::to_string(seed));
  return seed;
}

struct EngineConfig {
  std::string label;
  Options options;
  /// Tests that push through the config push their sync ops with
  /// OpAttrs::inline_ok (the pusher may run those that are ready).
  bool inline_ok = false;
};

inline void PrintTo(const EngineConfig& c, std::ostream* os) { *os << c.label; }

/// Every engine and worker count the differential tests cover.
inline std::vector<EngineConfig> all_engine_configs() {
  std::vector<EngineConfig> out;
  out.push_back({"naive", Options{.kind = EngineKind::naive}});
  for (unsigned w : {1U, 2U, 4U}) {
    out.push_back({"pooled/" + std::to_string(w), Options{.kind = EngineKind::pooled, .cpu_workers = w}});
    out.push_back({"per_device/" + std::to_string(w),
                   Options{.kind = EngineKind::per_device, .cpu_workers = w, .cpu_priority_workers = 1}});
  }
  // Ops that their pushers may run (OpAttrs::inline_ok), where the test uses it.
  out.push_back({"per_device/2/inline_ok", Options{.kind = EngineKind::per_device, .cpu_workers = 2}, true});
  return out;
}

/// The threaded engine kinds, for tests of behaviour the naive engine does
/// not have (where ops run: tests/core/placement_test.cpp).
struct ThreadedKind {
  std::string label;
  EngineKind kind;
};
inline void PrintTo(const ThreadedKind& k, std::ostream* os) { *os << k.label; }
inline auto threaded_kinds() {
  return ::testing::Values(ThreadedKind{"pooled", EngineKind::pooled},
                           ThreadedKind{"per_device", EngineKind::per_device});
}
inline std::string threaded_kind_name(const ::testing::TestParamInfo<ThreadedKind>& info) {
  return info.param.label;
}

/// Keeps this thread busy (not asleep) for `d`: an op body that takes time.
inline void busy_for(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

/// gtest parameter name of an EngineConfig ("per_device/2" -> "per_device_2").
inline std::string config_name(const ::testing::TestParamInfo<EngineConfig>& info) {
  std::string s = info.param.label;
  for (char& ch : s) {
    if (ch == '/') ch = '_';
  }
  return s;
}

/// splitmix64 step: a cheap non-commutative mixer for order-sensitive checks.
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ULL + b + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}


/// The body every differential test runs for one op of a random trace: a
/// deterministic function of the op index and the values it reads, folded
/// into the values it writes (order-sensitive through mix). `Op` has
/// `reads`, `writes` (variable indexes) and `spin` (busy iterations).
template <class Op>
void apply_op(const Op& op, std::size_t index, std::vector<std::uint64_t>& vals) {
  std::uint64_t h = index;
  for (int r : op.reads) h = mix(h, vals[static_cast<std::size_t>(r)]);
  volatile std::uint64_t sink = 0;
  for (int i = 0; i < op.spin; ++i) sink = sink + static_cast<std::uint64_t>(i);
  for (int w : op.writes) {
    auto& v = vals[static_cast<std::size_t>(w)];
    v = mix(v, h);
  }
}

/// The reference: a trace's ops applied in order on one thread.
template <class Op>
std::vector<std::uint64_t> replay_serial(const std::vector<Op>& ops, int vars) {
  std::vector<std::uint64_t> vals(static_cast<std::size_t>(vars), 0);
  for (std::size_t i = 0; i < ops.size(); ++i) apply_op(ops[i], i, vals);
  return vals;
}

/// A tiny executor: one thread running posted tasks in FIFO order.
class ThreadExecutor {
 public:
  ThreadExecutor() : thread_([this] { loop(); }) {}
  ~ThreadExecutor() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(std::function<void()> task) {
    // Notified under the lock: the task may finish the test (a coroutine's
    // last resumption) and the executor be destroyed at once; its destructor
    // takes the lock first, so it cannot destroy cv_ during this notify
    // (TSan caught that in CoroCancel.ResumeOnAnExecutor).
    std::lock_guard lock(m_);
    queue_.push_back(std::move(task));
    cv_.notify_one();
  }
  [[nodiscard]] std::thread::id id() const noexcept { return thread_.get_id(); }
  [[nodiscard]] int ran() {
    std::lock_guard lock(m_);
    return ran_;
  }

 private:
  void loop() {
    std::unique_lock lock(m_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, drained
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      ++ran_;
      lock.unlock();
      task();
      lock.lock();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  int ran_ = 0;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace ordo::test
