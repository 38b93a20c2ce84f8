// src/profiler/profiler.hpp - the recording side of ordo::Profiler. Internal.
//
// The engine calls the on_* hooks only when profiling is on (EngineCore::prof_
// is not null), so a disabled profiler costs one predictable branch per hook.
//
// Recording. Every thread that touches a profiled engine gets its own
// ThreadBuffer (found through a one-entry thread_local cache, else a
// registry under a mutex). An event is appended under the buffer's own
// SpinLock, which only readers (data(), clear()) ever contend for: there is
// no lock shared between recording threads. Events are joined per op (by id)
// when a profile is read, so the hooks write fixed-size records and nothing else.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ordo/detail/profile_hooks.hpp"
#include "ordo/options.hpp"
#include "ordo/profiler.hpp"
#include "core/records.hpp"
#include "core/spin_lock.hpp"

namespace ordo::detail {

enum class EventType : std::uint8_t {
  push,      ///< op: id, t = push; x = packed attributes, y = name id
  access,    ///< op: id; x = var id, y = 1 for a write
  start,     ///< op: id, t = began to run (or to be skipped)
  body_end,  ///< op: id, t = async body returned
  end,       ///< op: id, t = finished; y = ProfiledStatus, x = error message id
  edge,      ///< op: `to` id, t = granted (= from's end), x = `from` id, y = var id, flags = 1 if it released `to`
             ///< (an op's grant time is that of its last edge, or its push: no hook in dispatch)
  wait_all,  ///< op: id, t = wait_for_all called, x = its return time
  push_failed,  ///< op: id: the push threw after its push event (deleted variable)
  // Slices: work outside the engine's ops (ordo/detail/profile_hooks.hpp).
  slice_begin,  ///< op: slice id, t = begun; x = bytes, y = name id, flags = SliceCategory
  slice_info,   ///< op: slice id; x = the op that began it (its profiler id, 0: none), y = track name id
  slice_peer,   ///< op: slice id; x = key, y = peer (as uint32)
  slice_var,    ///< op: slice id; x = var (a transfer's variable)
  slice_end,    ///< op: slice id, t = ended; x = result (as uint64)
  slice_link,   ///< op: an op's id, t = when; x = the slice that released it, flags = SliceLink
  slice_span,   ///< op: slice id, t = begun where it ran (replaces slice_begin's t); x = bytes
  slice_after,  ///< op: slice id; x = the slice it began after, flags = 1 in stream order
};

/// How a slice released an op (slice_link's flags).
enum SliceLink : std::uint8_t {
  kLinkPush = 0,   ///< pushed it (a resumption, a callback)
  kLinkEnd = 1,    ///< finished it (an async op's OnComplete)
  kLinkFence = 2,  ///< the op was held by its fence and released when it ended
};

/// One fixed-size record (32 bytes).
struct Event {
  std::int64_t t;
  std::uint64_t op;
  std::uint64_t x;
  std::uint32_t y;
  EventType type;
  std::uint8_t flags;
};

inline constexpr std::size_t kChunkEvents = 1024;
inline constexpr std::uint32_t kIdBlock = 4096;

struct EventChunk {
  Event ev[kChunkEvents];
};

/// One thread's events. All fields below `lock` are guarded by it; the owner
/// thread takes it for each append, readers to copy or clear.
struct ThreadBuffer {
  SpinLock lock;
  std::vector<std::unique_ptr<EventChunk>> chunks;
  std::size_t count = 0;         ///< events recorded
  Event* next = nullptr;         ///< where the next event goes in the last chunk (null: no chunk yet)
  Event* limit = nullptr;        ///< end of the last chunk
  std::uint64_t dropped = 0;     ///< events refused: no chunk left in the budget
  // Owner thread only (never read by others).
  std::uint32_t next_id = 0;     ///< op ids: next_id++ while below id_limit, then a new block
  std::uint32_t id_limit = 0;
  std::int64_t last_end = 0;     ///< time of the last end event: stamps the edges of that completion
  std::uint64_t running = 0;     ///< the op started last on this thread and not ended (its id), 0: none
  std::uint64_t releasing = 0;   ///< the slice whose completion this thread delivers, 0: none
  struct NameCache {
    const char* ptr = nullptr;
    const char* interned = nullptr;
    std::uint32_t id = 0;
  };
  std::array<NameCache, 16> names{};
  // Immutable after creation.
  std::uint32_t index = 0;       ///< track number: position in ProfilerCore::buffers_
  std::string name;              ///< track name
};

class ProfilerCore {
 public:
  ProfilerCore(const ProfileOptions& options, const void* engine);
  ProfilerCore(const ProfilerCore&) = delete;
  ProfilerCore& operator=(const ProfilerCore&) = delete;

  [[nodiscard]] std::int64_t now() const noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch_).count();
  }

  // Hooks (engine side). op->engine is the profiled engine.
  void on_push(OpRecord* op, const AccessSpec* specs, std::size_t n) noexcept;
  // Out of line (src/profiler.cpp): the engine's call sites stay one branch and a call.
  void on_push_failed(const OpRecord* op) noexcept;
  void on_start(const OpRecord* op) noexcept;
  void on_body_end(std::uint32_t id) noexcept;
  void on_end(const OpRecord* op, const ErrorRecord* own_error) noexcept;
  /// Grants `to` its access to `var`, released by `from`'s completion (the
  /// engine's decrement of `to->wait`, acq_rel as there), and records the
  /// edge. Returns true if this was to's last access: it is ready.
  bool on_grant_access(const OpRecord* from, OpRecord* to, const VarRecord* var) noexcept;
  void on_wait_all(std::int64_t called) noexcept;

  // Slices (ordo/detail/profile_hooks.hpp).
  std::uint64_t slice_begin(SliceCategory category, const char* name, const char* track, std::uint64_t bytes,
                            std::int32_t peer, std::uint64_t key, std::uint64_t var) noexcept;
  void slice_end(std::uint64_t slice, std::int64_t result) noexcept;
  void slice_end_at(std::uint64_t slice, std::chrono::steady_clock::time_point begin,
                    std::chrono::steady_clock::time_point end, std::uint64_t bytes, std::int64_t result) noexcept;
  void slice_after(std::uint64_t slice, std::uint64_t before, bool same_stream) noexcept;
  void fence_release(std::uint64_t slice, const HeldOp& op) noexcept;
  void release_begin(std::uint64_t slice) noexcept;
  void release_end() noexcept;

  // Reading (ordo::Profiler).
  ProfileData data() const;
  void clear();
  std::uint64_t dropped() const;
  const ProfileOptions& options() const noexcept { return opts_; }

 private:
  ThreadBuffer* buffer() noexcept;
  ThreadBuffer* register_thread() noexcept;
  void record(EventType type, std::uint64_t op, std::int64_t t, std::uint64_t x, std::uint32_t y,
              std::uint8_t flags) noexcept;
  /// Appends to b (its lock held), or counts a drop when the budget is spent.
  void append(ThreadBuffer* b, const Event& e) noexcept {
    if (b->next == b->limit) [[unlikely]] {
      if (!grow(b)) {
        ++b->dropped;
        return;
      }
    }
    *b->next++ = e;
    ++b->count;
  }
  /// Gives b a new chunk from the budget; false if there is none left.
  bool grow(ThreadBuffer* b) noexcept;
  std::uint32_t intern(ThreadBuffer* b, const char* name) noexcept;
  std::uint32_t intern_string(std::string_view s) noexcept;
  std::uint32_t new_id(ThreadBuffer* b) noexcept;

  ProfileOptions opts_;
  const void* engine_;  ///< the EngineCore, to name its workers' tracks
  std::uint64_t uid_;   ///< process-unique, keys the thread_local buffer cache
  std::chrono::steady_clock::time_point epoch_;
  /// Chunks any buffer may still take (the memory bound). A buffer takes one
  /// with fetch_sub when its last one is full; clear() gives them all back.
  std::atomic<std::int64_t> chunks_left_;
  /// Op ids are handed to threads in blocks of kIdBlock (one atomic add per
  /// block, not per push); 0 is never an id. 32 bits: 4 G ops per profile.
  std::atomic<std::uint32_t> next_id_block_{1};

  mutable std::mutex registry_mutex_;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers_;                ///< guarded by registry_mutex_
  std::unordered_map<std::uint64_t, ThreadBuffer*> by_thread_;         ///< guarded by registry_mutex_

  /// Interned names: op names and error messages. Entries are never removed
  /// or moved (deque-like chunks), so a pointer into them stays valid.
  mutable std::mutex names_mutex_;
  std::vector<std::unique_ptr<std::string>> names_;                   ///< guarded by names_mutex_
  std::unordered_map<std::string_view, std::uint32_t> name_ids_;       ///< guarded by names_mutex_
};

}  // namespace ordo::detail
