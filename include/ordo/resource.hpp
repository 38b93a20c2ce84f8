// ordo/resource.hpp - the resource manager: scratch space and random streams
// handed to ops as variables (MXNet's ResourceManager, in engine terms).
//
// Each resource owns an engine variable. An op that uses it declares that
// variable as mutated, so two ops sharing a resource run in push order and
// ops on different resources run in parallel; no lock, no worker waits.
//
//   ordo::TempSpace temp(engine, {.arenas = 4});
//   ordo::RandomStream rng(engine, /*seed=*/42);
//   ordo::TempArena& scratch = temp.next();  // round robin
//   engine.push_sync([&] {
//     std::span<float> tmp = scratch.get_as<float>(n);  // grows on demand
//     augment(in, out, tmp, rng.uniform());              // draws in push order
//   }, ctx, {in}, {out, scratch.var(), rng.var()});
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ordo/engine.hpp"
#include "ordo/error.hpp"
#include "ordo/storage.hpp"
#include "ordo/var.hpp"

namespace ordo {

/// Thrown by TempArena::get when a request passes the arena's cap. code()
/// is Errc::invalid_argument; what() names the size asked for and the cap.
///
/// @par Thread safety
/// An immutable exception object.
class CapacityError : public Error {
 public:
  CapacityError(std::size_t requested, std::size_t cap, const std::string& what)
      : Error(Errc::invalid_argument, what), requested_(requested), cap_(cap) {}
  [[nodiscard]] std::size_t requested() const noexcept { return requested_; }
  [[nodiscard]] std::size_t cap() const noexcept { return cap_; }

 private:
  std::size_t requested_;
  std::size_t cap_;
};

struct TempSpaceOptions {
  /// K: arenas handed out round robin. Ops on the same arena are ordered;
  /// ops on different ones may run in parallel (MXNet: MXNET_CPU_TEMP_COPY, 4).
  unsigned arenas = 4;
  /// Largest size one arena may grow to (0: no cap). A request over it
  /// throws CapacityError from TempArena::get.
  std::size_t cap_bytes = 0;
  /// Arenas grow to page multiples of this page size, page aligned.
  std::size_t page = 4096;
  /// Null: HostAllocator::system().
  std::shared_ptr<HostAllocator> allocator{};
};

/// One scratch arena of a TempSpace: memory and the variable that orders
/// its users. Its contents are undefined at the start of every op.
///
/// @par Thread safety
/// get() only inside an op that mutates var() (the engine makes that op
/// the arena's only user); var(), capacity() from anywhere.
class TempArena {
 public:
  TempArena(const TempArena&) = delete;
  TempArena& operator=(const TempArena&) = delete;
  ~TempArena();

  [[nodiscard]] Var var() const noexcept { return var_; }
  /// At least `bytes` of scratch, page aligned. Grows the arena (to `bytes`
  /// rounded up to a page) if it is smaller; never shrinks it, so a steady
  /// workload allocates only while it warms up. Growing drops the old
  /// contents. Throws CapacityError (naming the size and the cap) if
  /// `bytes` is over the cap, or the allocator's failure; like any
  /// exception of an op body, it fails the op, whose error then sits on
  /// every variable it mutates, this arena's included: later ops on the
  /// arena are skipped until a wait (wait_for_var(var()), wait_for_all)
  /// observes and clears it.
  [[nodiscard]] std::span<std::byte> get(std::size_t bytes);
  template <class T>
  [[nodiscard]] std::span<T> get_as(std::size_t count) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 4096, "scratch holds trivial types");
    if (count > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    std::span<std::byte> s = get(count * sizeof(T));
    return {reinterpret_cast<T*>(s.data()), count};
  }
  /// Bytes the arena holds now.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_.load(std::memory_order_relaxed); }

 private:
  friend class TempSpace;
  TempArena(Var v, const TempSpaceOptions& o) : var_(v), allocator_(o.allocator), cap_bytes_(o.cap_bytes), page_(o.page) {}
  Var var_;
  std::shared_ptr<HostAllocator> allocator_;
  std::size_t cap_bytes_ = 0;
  std::size_t page_ = 4096;
  std::byte* p_ = nullptr;  ///< written only by the op that mutates var_
  /// Size of p_. Written by that op (relaxed: capacity() is a statistic;
  /// the engine's ordering of var_ publishes p_ and the size to the next op).
  std::atomic<std::size_t> capacity_{0};
};

/// K scratch arenas handed out round robin, each with its variable: per-op
/// temporary space with no allocation in steady state (MXNet's kTempSpace).
/// Arenas grow on demand and never shrink while the TempSpace lives.
///
/// Lifetime: the engine must outlive the TempSpace. Destroying it deletes
/// the arenas' variables; each arena (and its memory) is freed after the
/// last op pushed on it, so ops may still hold TempArena references.
///
/// @par Thread safety
/// next(), arena(), size(), reserved_bytes() from any thread, concurrently.
class TempSpace {
 public:
  explicit TempSpace(Engine& engine, TempSpaceOptions options = {});
  ~TempSpace();
  TempSpace(const TempSpace&) = delete;
  TempSpace& operator=(const TempSpace&) = delete;

  /// The next arena, round robin (an atomic counter).
  [[nodiscard]] TempArena& next() noexcept;
  /// Arena `i % size()`: a fixed choice, e.g. per stage or per stream.
  [[nodiscard]] TempArena& arena(std::size_t i) noexcept { return *arenas_[i % arenas_.size()]; }
  [[nodiscard]] std::size_t size() const noexcept { return arenas_.size(); }
  /// Sum of the arenas' capacities.
  [[nodiscard]] std::size_t reserved_bytes() const noexcept;

 private:
  Engine& engine_;
  TempSpaceOptions opts_;
  std::vector<std::unique_ptr<TempArena>> arenas_;
  std::atomic<std::size_t> next_{0};  ///< round-robin counter (relaxed: any arena will do)
};

/// A random number generator as an engine variable. An op that draws from
/// it declares writes(var()), so draws happen in push order whatever the
/// schedule and thread count: a run is reproducible from its seed.
/// std::mt19937_64 (the same sequence on every platform); uniform() uses
/// the top 53 bits, so it too is bit-exact everywhere (the standard
/// distributions are not: use them only where that does not matter).
///
/// Lifetime: the engine must outlive it, and it must outlive the ops that
/// use it (like any object an op refers to). RandomStreams owns its
/// streams and lifts that rule for them.
///
/// @par Thread safety
/// generator(), next(), uniform() only inside an op that mutates var();
/// var() and seed() from anywhere.
class RandomStream {
 public:
  using Generator = std::mt19937_64;
  RandomStream(Engine& engine, std::uint64_t seed);
  ~RandomStream();
  RandomStream(const RandomStream&) = delete;
  RandomStream& operator=(const RandomStream&) = delete;

  [[nodiscard]] Var var() const noexcept { return var_; }
  [[nodiscard]] std::uint64_t seed() const noexcept { return seed_; }
  [[nodiscard]] Generator& generator() noexcept { return gen_; }
  /// The next 64 random bits.
  std::uint64_t next() { return gen_(); }
  /// Uniform in [0, 1), from the top 53 bits of next().
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

 private:
  friend class RandomStreams;
  Engine& engine_;
  Var var_;
  std::uint64_t seed_;
  Generator gen_;
};

/// The parallel form: `n` independent RandomStreams, stream i seeded with
/// seed + i (so stream i's sequence depends on nothing but seed and i).
/// Typically n is the number of CPU workers (ordo::usable_cpus() for the
/// default engine): ops on different streams run in parallel, ops on one
/// stream in push order. Reproducibility comes from choosing the stream by
/// something deterministic (a shard, a sample or a batch index: stream
/// key % n), never by the worker an op happens to run on.
///
/// Lifetime: destroying it deletes the streams' variables; each stream is
/// freed after the last op pushed on it.
///
/// @par Thread safety
/// operator[], size() from any thread; each stream as RandomStream.
class RandomStreams {
 public:
  RandomStreams(Engine& engine, std::uint64_t seed, std::size_t n);
  ~RandomStreams();
  RandomStreams(const RandomStreams&) = delete;
  RandomStreams& operator=(const RandomStreams&) = delete;

  /// Stream `i % size()`.
  [[nodiscard]] RandomStream& operator[](std::size_t i) noexcept { return *streams_[i % streams_.size()]; }
  [[nodiscard]] std::size_t size() const noexcept { return streams_.size(); }

 private:
  Engine& engine_;
  std::vector<std::unique_ptr<RandomStream>> streams_;
};

}  // namespace ordo
