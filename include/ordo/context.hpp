// ordo/context.hpp - where an op runs (Context), what the worker hands it
// (RunContext), how it is routed (FnProperty) and its per-op attributes.
#pragma once

#include <cstdint>

namespace ordo {

enum class DeviceType : std::uint8_t { cpu = 0, gpu = 1 };

/// The device an op is pushed to. Cheap value type.
struct Context {
  DeviceType type = DeviceType::cpu;
  int device_id = 0;

  static constexpr Context cpu(int id = 0) noexcept { return {DeviceType::cpu, id}; }
  static constexpr Context gpu(int id = 0) noexcept { return {DeviceType::gpu, id}; }
  [[nodiscard]] constexpr bool is_gpu() const noexcept { return type == DeviceType::gpu; }
  friend constexpr bool operator==(const Context&, const Context&) = default;
};

/// How an op is routed to workers.
enum class FnProperty : std::uint8_t {
  normal = 0,        ///< compute: the context's compute workers
  copy_to_device,    ///< host -> device copy: the device's copy-in worker
  copy_from_device,  ///< device -> host copy: the device's copy-out worker
  cpu_prioritized,   ///< CPU work ordered by priority (higher first) on the priority pool
  async,             ///< a cheap launcher of asynchronous work: runs on the engine thread that makes it ready
  delete_var,        ///< set by delete_variable
};

/// Handed to an op body by the worker that runs it.
struct RunContext {
  Context ctx;                 ///< the context the op was pushed to
  void* stream = nullptr;      ///< device stream (set by the gpu layer), else null
  int worker = -1;             ///< index of the worker within its pool, -1 when run inline
};

/// Optional per-op attributes. Designated initializers read well:
/// `{.prop = FnProperty::cpu_prioritized, .priority = 5, .name = "update"}`.
struct OpAttrs {
  FnProperty prop = FnProperty::normal;
  int priority = 0;             ///< honoured by the CPU-priority pool; FIFO elsewhere
  const char* name = nullptr;   ///< must outlive the op and its OnComplete's calls (a literal is ideal)
  bool always_run = false;      ///< run even if an input carries an error (and, on success, clear it)
  /// A short body that never blocks: if the op is ready when pushed, the
  /// pushing thread may run it in place, like a call, instead of handing it
  /// to a worker (pooled and per-device engines; see "Where ops run" in
  /// docs/guide.md). Without it, no push ever runs an op body.
  bool inline_ok = false;
  /// Server error policy: if this op fails (its body throws, or its
  /// completion passes an error), the error goes to whoever awaits the op
  /// only (a coroutine's co_await, an ordo::asio handler) and is NOT stored
  /// on the variables it mutates: the next op on them runs normally. The
  /// op's writes count as made (the version advances; the data is whatever
  /// the body left, which the engine cannot undo). An op with no awaiter
  /// (push_sync) reports the error through wait_for_all / the destructor
  /// only, as an op with no outputs does. An error inherited from an input
  /// still skips the op and passes on as usual. docs/coroutines.md, "Server
  /// error policy".
  bool error_to_awaiter = false;
};

}  // namespace ordo
