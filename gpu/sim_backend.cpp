// gpu/sim_backend.cpp - the simulated stream/event backend: each stream is a
// FIFO of items run by its own thread; events are completion counters,
// stamped with the time their stream ran them (the trace's GPU work). Its
// purpose is to make the gpu layer's ordering observable without a GPU:
// random delays per item let a missing cross-stream wait, or a CPU read of
// work that has not finished, produce a wrong result.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <vector>
#include <set>
#include <exception>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "ordo/gpu/backend.hpp"

namespace ordo::gpu {
namespace {

/// A simulated event. Every record() is numbered; a wait refers to the
/// record current when it was enqueued, a query to the latest one (CUDA's
/// semantics). Records on different streams complete in any order (an event
/// may be recorded again while an earlier record is pending), so completion
/// is kept per record: all records <= `low` completed, plus those in `above`.
/// Guarded by `mutex`.
struct SimEvent {
  std::mutex mutex;
  std::condition_variable cv;
  std::uint64_t recorded = 0;
  std::uint64_t low = 0;
  std::set<std::uint64_t> above;
  std::map<std::uint64_t, std::exception_ptr> failed;  ///< failures, by record
  /// The latest record completed so far, and when its stream ran it
  /// (a timed event's only).
  bool timed = false;
  std::uint64_t stamped = 0;
  std::chrono::steady_clock::time_point stamped_at{};
  int device = 0;

  [[nodiscard]] bool completed(std::uint64_t serial) const { return serial <= low || above.count(serial) != 0; }
  void complete(std::uint64_t serial, const std::exception_ptr& error, std::chrono::steady_clock::time_point at) {
    if (error) failed[serial] = error;
    if (serial > stamped) {
      stamped = serial;
      stamped_at = at;
    }
    above.insert(serial);
    while (!above.empty() && *above.begin() == low + 1) {
      low = *above.begin();
      above.erase(above.begin());
    }
  }
  [[nodiscard]] std::exception_ptr error_of(std::uint64_t serial) const {
    auto it = failed.find(serial);
    return it != failed.end() ? it->second : std::exception_ptr{};
  }
};

struct Item {
  enum Kind { task, record, wait } kind = task;
  HostFn fn;
  SimEvent* event = nullptr;
  std::uint64_t serial = 0;  ///< record: this record's number; wait: the record waited for
};

/// One stream: items run in order by `thread`. Fields guarded by `mutex`
/// except `error` and `rng`, touched by the stream's thread only.
class SimStream {
 public:
  SimStream(int device, std::chrono::microseconds max_delay, std::uint64_t seed)
      : device_(device), max_delay_(max_delay), rng_(seed), thread_([this] { run(); }) {}
  ~SimStream() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  SimStream(const SimStream&) = delete;
  SimStream& operator=(const SimStream&) = delete;

  void push(Item item) {
    {
      std::lock_guard lock(mutex_);
      if (captured_ != nullptr) {
        if (item.kind != Item::task) {
          throw GpuError(900, "simErrorStreamCaptureUnsupported",
                         "an event record or wait on a stream being captured (the simulated backend keeps host "
                         "tasks and copies only)");
        }
        captured_->push_back(std::move(item));
        return;
      }
      items_.push_back(std::move(item));
      ++queued_;
    }
    cv_.notify_all();
  }
  void synchronize() {
    std::unique_lock lock(mutex_);
    idle_cv_.wait(lock, [this] { return finished_ == queued_; });
  }
  [[nodiscard]] int device() const noexcept { return device_; }
  /// Capture mode: pushed items go to `into` instead of the queue (null: run them).
  void capture(std::vector<Item>* into) {
    std::lock_guard lock(mutex_);
    if (into != nullptr && captured_ != nullptr) {
      throw GpuError(900, "simErrorStreamCaptureUnsupported", "begin_capture: the stream is being captured already");
    }
    if (into == nullptr && captured_ == nullptr) {
      throw GpuError(901, "simErrorStreamCaptureInvalidated", "end_capture: the stream is not being captured");
    }
    captured_ = into;
  }

 private:
  void delay() {
    if (max_delay_.count() <= 0) return;
    std::uniform_int_distribution<long> d(0, static_cast<long>(max_delay_.count()));
    const long us = d(rng_);
    if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
  }
  void run() {
    for (;;) {
      Item item;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return stop_ || !items_.empty(); });
        if (items_.empty()) return;  // stopping and drained
        item = std::move(items_.front());
        items_.pop_front();
      }
      switch (item.kind) {
        case Item::task:
          delay();
          if (!error_) {
            try {
              item.fn();
            } catch (...) {
              error_ = std::current_exception();  // sticky, as a CUDA kernel fault
            }
          }
          break;
        case Item::record: {
          delay();
          SimEvent& e = *item.event;
          // The time of the stream's work before it (no lock: `timed` is set before any record).
          const auto at = e.timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
          std::lock_guard lock(e.mutex);
          e.complete(item.serial, error_, at);
          e.cv.notify_all();  // under the lock: the event may be destroyed as soon as it is released
          break;
        }
        case Item::wait: {
          SimEvent& e = *item.event;
          std::unique_lock lock(e.mutex);
          e.cv.wait(lock, [&] { return e.completed(item.serial); });
          if (std::exception_ptr err = e.error_of(item.serial); err && !error_) {
            error_ = err;  // the failure travels along the wait
          }
          break;
        }
      }
      item.fn = nullptr;  // destroy captures before reporting progress
      {
        std::lock_guard lock(mutex_);
        ++finished_;
      }
      idle_cv_.notify_all();
    }
  }

  int device_;
  std::chrono::microseconds max_delay_;
  std::mt19937_64 rng_;
  std::exception_ptr error_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<Item> items_;
  std::vector<Item>* captured_ = nullptr;  ///< capture mode's items, owned by the backend's capture
  std::uint64_t queued_ = 0;
  std::uint64_t finished_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is constructed
};

GpuError bad_device(int device, int count) {
  return GpuError(101, "simErrorInvalidDevice",
                  "device " + std::to_string(device) + " (the simulated backend has " + std::to_string(count) + ")");
}

class SimBackend final : public Backend {
 public:
  explicit SimBackend(SimOptions o) : opts_(o) {}
  const char* name() const noexcept override { return "simulated"; }
  int device_count() const noexcept override { return opts_.devices; }
  std::string unavailable_reason() const override {
    return opts_.devices > 0 ? std::string() : std::string("the simulated backend was configured with 0 devices");
  }

  StreamHandle create_stream(int device) override {
    check(device);
    std::uint64_t n;
    {
      std::lock_guard lock(mutex_);
      n = ++streams_;
    }
    return new SimStream(device, opts_.max_delay, opts_.seed * 0x9E3779B97F4A7C15ULL + n);
  }
  void destroy_stream(StreamHandle s) noexcept override { delete static_cast<SimStream*>(s); }
  EventHandle create_event(int device, bool, bool timed) override {
    check(device);
    auto* e = new SimEvent;
    e->device = device;
    e->timed = timed;
    return e;
  }
  void destroy_event(EventHandle e) noexcept override { delete static_cast<SimEvent*>(e); }

  void record(EventHandle event, StreamHandle stream) override {
    auto* e = static_cast<SimEvent*>(event);
    std::uint64_t serial;
    {
      std::lock_guard lock(e->mutex);
      serial = ++e->recorded;
    }
    static_cast<SimStream*>(stream)->push(Item{Item::record, nullptr, e, serial});
  }
  void wait(StreamHandle stream, EventHandle event) override {
    auto* e = static_cast<SimEvent*>(event);
    std::uint64_t serial;
    {
      std::lock_guard lock(e->mutex);
      serial = e->recorded;
    }
    if (serial == 0) return;  // never recorded: nothing to wait for (as CUDA)
    static_cast<SimStream*>(stream)->push(Item{Item::wait, nullptr, e, serial});
  }
  bool query(EventHandle event) override {
    auto* e = static_cast<SimEvent*>(event);
    std::lock_guard lock(e->mutex);
    if (!e->completed(e->recorded)) return false;
    if (std::exception_ptr err = e->error_of(e->recorded)) std::rethrow_exception(err);
    return true;
  }
  void synchronize(EventHandle event) override {
    auto* e = static_cast<SimEvent*>(event);
    std::unique_lock lock(e->mutex);
    const std::uint64_t target = e->recorded;
    e->cv.wait(lock, [&] { return e->completed(target); });
    if (std::exception_ptr err = e->error_of(target)) std::rethrow_exception(err);
  }
  void synchronize_stream(StreamHandle stream) override { static_cast<SimStream*>(stream)->synchronize(); }
  std::chrono::steady_clock::time_point completed_at(int, EventHandle event) override {
    auto* e = static_cast<SimEvent*>(event);
    std::lock_guard lock(e->mutex);
    if (!e->timed || e->stamped != e->recorded || e->stamped == 0) {
      throw GpuError(600, "simErrorNotReady", "completed_at: the event is untimed, or its latest record has not completed");
    }
    return e->stamped_at;
  }

  void host_task(StreamHandle stream, HostFn fn) override {
    static_cast<SimStream*>(stream)->push(Item{Item::task, std::move(fn), nullptr, 0});
  }
  void copy(void* dst, const void* src, std::size_t bytes, StreamHandle stream) override {
    host_task(stream, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }

  // Capture keeps the stream's items; a launch pushes copies of them, each
  // delayed as any item is, so a group's missing wait shows as it would
  // with the work pushed op by op.
  void begin_capture(StreamHandle stream) override {
    auto items = std::make_unique<std::vector<Item>>();
    static_cast<SimStream*>(stream)->capture(items.get());
    std::lock_guard lock(mutex_);
    capturing_[stream] = std::move(items);
  }
  GraphHandle end_capture(StreamHandle stream) override {
    static_cast<SimStream*>(stream)->capture(nullptr);
    std::lock_guard lock(mutex_);
    auto it = capturing_.find(stream);
    std::unique_ptr<std::vector<Item>> items = std::move(it->second);
    capturing_.erase(it);
    return items.release();
  }
  void launch(GraphHandle graph, StreamHandle stream) override {
    for (const Item& item : *static_cast<std::vector<Item>*>(graph)) static_cast<SimStream*>(stream)->push(item);
  }
  void destroy_graph(GraphHandle graph) noexcept override { delete static_cast<std::vector<Item>*>(graph); }

  void* alloc_device(int device, std::size_t bytes) override {
    check(device);
    return alloc(bytes);
  }
  void free_device(int, void* p) noexcept override { std::free(p); }
  void* alloc_pinned(std::size_t bytes) override { return alloc(bytes); }
  void free_pinned(void* p) noexcept override { std::free(p); }

 private:
  void check(int device) const {
    if (device < 0 || device >= opts_.devices) throw bad_device(device, opts_.devices);
  }
  static void* alloc(std::size_t bytes) {
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + (bytes == 0 ? 256 : 0));
    if (p == nullptr) throw GpuError(2, "simErrorMemoryAllocation", "out of memory");
    return p;
  }

  SimOptions opts_;
  std::mutex mutex_;
  std::uint64_t streams_ = 0;  ///< guarded by mutex_
  /// Streams being captured, and their kept items (guarded by mutex_).
  std::map<StreamHandle, std::unique_ptr<std::vector<Item>>> capturing_;
};

}  // namespace

std::unique_ptr<Backend> make_sim_backend(SimOptions options) { return std::make_unique<SimBackend>(options); }

}  // namespace ordo::gpu
