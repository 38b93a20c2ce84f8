// ordo/profiler.hpp - what the engine did, op by op: a Chrome / Perfetto
// trace, the dependency graph it discovered (Graphviz DOT), a summary table.
//
// Off by default (Options::profile.enabled); when off, the engine pays one
// predictable branch per hook and records nothing. See docs/profiler.md.
//
//   ordo::Options o;
//   o.profile.enabled = true;                     // or ORDO_PROFILE=trace.json + Options::from_env()
//   ordo::Engine engine(o);
//   ... push ops ...
//   engine.wait_for_all();
//   engine.profiler().write_chrome_trace("trace.json");  // open in ui.perfetto.dev
//   engine.profiler().write_dot("graph.dot");            // dot -Tsvg graph.dot > graph.svg
//   std::cout << engine.profiler().summary();            // count, total, mean, p99 per op name
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "ordo/context.hpp"

namespace ordo {

namespace detail {
class ProfilerCore;
}

/// What kind of engine call an op came from.
enum class ProfiledKind : std::uint8_t {
  sync,             ///< push_sync (or a sync pre-built operator)
  async,            ///< push_async, a coroutine push, or an async pre-built operator
  post,             ///< Engine::post
  wait_for_var,     ///< Engine::wait_for_var: push = call, end = the variable became ready
  wait_for_all,     ///< Engine::wait_for_all: start = call, end = return (not an op of the engine)
  delete_variable,  ///< Engine::delete_variable
};
[[nodiscard]] const char* to_string(ProfiledKind k) noexcept;

/// How a profiled op ended.
enum class ProfiledStatus : std::uint8_t {
  ok,          ///< ran and finished
  failed,      ///< its body threw (or its OnComplete carried an exception): see OpProfile::error
  skipped,     ///< an input carried an error: the body never ran (start == end)
  unfinished,  ///< not finished when the profile was taken, or its later events were dropped
};
[[nodiscard]] const char* to_string(ProfiledStatus s) noexcept;

/// One access of a profiled op.
struct ProfiledAccess {
  std::uint32_t var = 0;  ///< Var::id()
  bool write = false;
};

/// One op as the profiler saw it. Times are nanoseconds since the profiler
/// started (the engine's construction); -1 where the event has not happened
/// (or was dropped). For every finished op push <= grant <= start <= end.
struct OpProfile {
  std::uint64_t id = 0;     ///< 1, 2, ... in push order within this profile (as in the trace and the DOT graph)
  std::string name;         ///< OpAttrs::name, "" when unnamed
  ProfiledKind kind = ProfiledKind::sync;
  FnProperty prop = FnProperty::normal;
  Context ctx{};
  int priority = 0;
  ProfiledStatus status = ProfiledStatus::unfinished;
  std::string error;        ///< what() of the exception: failed: its own; skipped: the one that skipped it;
                            ///< wait_for_var (status ok): the one its caller rethrew
  std::int64_t push_ns = -1;   ///< the push call registered the op's accesses
  std::int64_t grant_ns = -1;  ///< its last access was granted: it became ready
  std::int64_t start_ns = -1;  ///< a thread began to run it (body called, or skip started)
  std::int64_t body_end_ns = -1;  ///< async only: the body returned (end comes later, with OnComplete)
  std::int64_t end_ns = -1;    ///< finished (sync: body returned; async: OnComplete called)
  int push_thread = -1;     ///< index into ProfileData::threads
  int run_thread = -1;      ///< thread that ran (started) it
  int end_thread = -1;      ///< thread that finished it (async: the one that called OnComplete)
  std::vector<ProfiledAccess> accesses;
};

/// An op -> op dependency the engine discovered: `to`'s access to `var`
/// waited in the variable's queue and was granted when `from` finished.
struct DependencyEdge {
  std::uint64_t from = 0;  ///< OpProfile::id
  std::uint64_t to = 0;
  std::uint32_t var = 0;   ///< Var::id()
  bool released = false;   ///< this grant was `to`'s last: `from` made it ready
  std::int64_t time_ns = -1;
};

/// Work outside the engine's ops, drawn beside them: an ordo::io request
/// (submission to delivery), a GPU kernel or copy, an ordo::dist transfer.
struct SliceProfile {
  std::uint64_t id = 0;        ///< 1, 2, ... by begin time within this profile (args.slice in the trace)
  std::string category;        ///< "io", "gpu" or "transfer"
  std::string name;            ///< the request or work: "read", "write", "open", "sleep_for", a GPU op's name, "send", ...
  std::string track;           ///< where it ran: "io_uring", "threads", "gpu0 compute 1", "rank 0", ...
  std::int64_t begin_ns = -1;  ///< submitted; GPU work: began on its stream (times as in OpProfile)
  std::int64_t end_ns = -1;    ///< delivered / finished; -1: not yet
  std::uint64_t bytes = 0;     ///< bytes it was asked to move; GPU work: copied by Stream::copy (0 where none)
  std::int64_t result = 0;     ///< its outcome: bytes moved, an fd, 0, or -errno; GPU work: 0, or -code of its failure
  std::uint64_t launched_by = 0;  ///< the op whose body began it (OpProfile::id), 0: none
  int thread = -1;             ///< thread that began it (index into ProfileData::threads)
  int end_thread = -1;         ///< thread that ended it
  std::int32_t peer = -1;      ///< transfers: the other rank
  std::uint64_t key = 0;       ///< transfers: the variable's transfer number (with var and the ranks: unique)
  std::uint64_t var = 0;       ///< transfers: the distributed variable's id
};

/// A slice's completion released an op: pushed it (a coroutine's
/// resumption, a callback) or finished it (an async op's OnComplete).
struct SliceRelease {
  std::uint64_t slice = 0;  ///< SliceProfile::id
  std::uint64_t op = 0;     ///< OpProfile::id
  bool at_end = false;      ///< true: it finished the op; false: it pushed the op (or, fence: released it)
  bool fence = false;       ///< GPU work: the op was held until the slice's work finished (ordo/fence.hpp)
};

/// GPU work that could not begin before other GPU work ended: its stream
/// waited for the other's event (a variable both use), or ran it just before.
struct SliceWait {
  std::uint64_t before = 0;  ///< SliceProfile::id
  std::uint64_t after = 0;
  bool same_stream = false;  ///< stream order, not an event wait (no arrow in the trace)
};

/// Everything recorded, joined per op. Ops sorted by push time.
struct ProfileData {
  std::vector<OpProfile> ops;
  std::vector<DependencyEdge> edges;
  std::vector<SliceProfile> slices;          ///< sorted by begin time
  std::vector<SliceRelease> slice_releases;
  std::vector<SliceWait> slice_waits;
  std::vector<std::string> threads;  ///< track names, "cpu/0", "thread 1 (main)", ...
  /// The profile's time 0 as a steady_clock (CLOCK_MONOTONIC) time: what
  /// puts the traces of several processes of one machine on one time line.
  std::int64_t clock_origin_ns = 0;
  std::uint64_t dropped_events = 0;  ///< events not recorded because ProfileOptions::max_events was reached
};

/// Per-name statistics of ProfileSummary. Run time = end - start, except for
/// wait_for_var: end - push (how long its caller was blocked).
struct OpStats {
  std::string name;             ///< op name ("(unnamed)" for ops without one)
  std::uint64_t count = 0;      ///< finished ops (ok + failed + skipped)
  std::uint64_t failed = 0;
  std::uint64_t skipped = 0;
  std::int64_t total_ns = 0;    ///< sum of run times
  std::int64_t mean_ns = 0;
  std::int64_t p99_ns = 0;      ///< nearest-rank 99th percentile of run times
  std::int64_t max_ns = 0;
  std::int64_t mean_wait_ns = 0;   ///< mean push -> grant (waiting for dependencies)
  std::int64_t mean_queue_ns = 0;  ///< mean grant -> start (waiting for a worker)
};

/// Per category and name statistics of the slices (io requests, GPU work,
/// transfers) in ProfileSummary: time = end - begin (submission to delivery).
struct SliceStats {
  std::string category;      ///< "io", "gpu", "transfer"
  std::string name;          ///< "read", "write", ...
  std::uint64_t count = 0;   ///< finished slices
  std::uint64_t failed = 0;  ///< finished with a negative result (-errno)
  std::uint64_t bytes = 0;   ///< summed
  std::int64_t total_ns = 0;
  std::int64_t p50_ns = 0;   ///< nearest rank
  std::int64_t p99_ns = 0;
  std::int64_t max_ns = 0;
};

/// One op or slice on the critical path.
struct CriticalStep {
  std::string kind;  ///< "op", or a slice's category ("io", "gpu", "transfer")
  std::string name;  ///< the op's name ("(unnamed)" without one) or the request's ("read", ...)
  std::uint64_t id = 0;  ///< OpProfile::id or SliceProfile::id
  std::int64_t begin_ns = 0;  ///< op: start (a wait: its call); slice: begin
  std::int64_t end_ns = 0;
};

/// The chain of dependent ops, io requests, GPU work and transfers that
/// bounded the run: from the work that finished last, back through what
/// each step waited for (the op whose completion made it ready, the request
/// whose delivery finished or pushed it, the GPU work whose fence held it,
/// the op that began a request, the GPU work a stream ran or waited for first).
struct CriticalPath {
  std::vector<CriticalStep> steps;  ///< first to last
  /// Time the chain covers: each step's time not overlapping the step before.
  std::int64_t length_ns = 0;
  /// From the first push to the last end of the profile.
  std::int64_t wall_ns = 0;
  /// Its longest steps (at most five), longest first.
  std::vector<CriticalStep> top;
};

/// The summary table: one row per op name, largest total first.
struct ProfileSummary {
  CriticalPath critical_path;
  std::vector<OpStats> ops;
  std::vector<SliceStats> slices;    ///< one row per category and name, largest total first
  std::uint64_t unfinished = 0;      ///< ops not finished when it was taken (not in the rows)
  std::uint64_t dropped_events = 0;  ///< see ProfileData::dropped_events
  /// A printable fixed-width table (the same as operator<<).
  [[nodiscard]] std::string table() const;
};
std::ostream& operator<<(std::ostream& os, const ProfileSummary& s);

/// Options of Profiler::write_dot.
struct DotOptions {
  /// Most ops drawn (the first ones, by push order); the graph says when it
  /// left ops out. DOT is for small runs: Graphviz struggles past a few thousand.
  std::size_t max_ops = 2000;
};

/// The profiler of one engine, from Engine::profiler(). A cheap handle, valid
/// while the engine lives.
///
/// Every member except enabled() throws ordo::Error{Errc::invalid_argument}
/// when profiling is off (Options::profile.enabled was false). The write_*
/// members taking a path throw std::system_error when the file cannot be
/// written.
///
/// What is recorded: see docs/profiler.md. Ops still in flight when a
/// profile is taken appear as unfinished (in data() and the summary's count)
/// and are left out of the trace and the graph.
///
/// @par Thread safety
/// Every member may be called from any thread, concurrently with each other
/// and with engine work: each thread records into its own buffer (its own
/// uncontended lock, no global lock), and readers take the buffers' locks in
/// turn. clear() during engine work is safe too; the ops it cuts in half are
/// left out (their later events have no push to join).
class Profiler {
 public:
  [[nodiscard]] bool enabled() const noexcept { return core_ != nullptr; }

  /// Everything recorded so far, joined per op.
  [[nodiscard]] ProfileData data() const;
  /// Chrome trace event JSON (chrome://tracing, ui.perfetto.dev).
  void write_chrome_trace(std::ostream& os) const;
  void write_chrome_trace(const std::string& path) const;
  /// The dependency graph the engine discovered, as Graphviz DOT.
  void write_dot(std::ostream& os, DotOptions options = {}) const;
  void write_dot(const std::string& path, DotOptions options = {}) const;
  /// Count, total, mean, p99 run time per op name.
  [[nodiscard]] ProfileSummary summary() const;
  /// Events not recorded because the buffer limit was reached.
  [[nodiscard]] std::uint64_t dropped_events() const;
  /// Forgets every event recorded so far and frees their memory.
  void clear();

 private:
  friend class Engine;
  explicit Profiler(detail::ProfilerCore* core) noexcept : core_(core) {}
  detail::ProfilerCore& core() const;
  detail::ProfilerCore* core_ = nullptr;
};

}  // namespace ordo
