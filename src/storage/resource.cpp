// src/storage/resource.cpp - TempSpace and RandomStream(s) (ordo/resource.hpp).
#include "ordo/resource.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <new>
#include <string>
#include <utility>

namespace ordo {

namespace {
/// The deleter that keeps a resource alive until the last op pushed on its
/// variable has finished (run, or destroyed if the engine skips it).
template <class T>
struct KeepUntilDeleted {
  std::unique_ptr<T> owned;
  void operator()() noexcept { owned.reset(); }
};

/// Deletes `var` behind the ops pushed on it, freeing `owned` then. Never
/// throws: if the engine refuses (the variable is gone already), `owned` is
/// freed here.
template <class T>
void delete_after_ops(Engine& engine, Var var, std::unique_ptr<T> owned) noexcept {
  try {
    engine.delete_variable(KeepUntilDeleted<T>{std::move(owned)}, Context::cpu(), var);
  } catch (...) {
  }
}
}  // namespace

// ---------------------------------------------------------------- TempSpace

TempArena::~TempArena() {
  if (p_ != nullptr) allocator_->deallocate(p_, capacity_.load(std::memory_order_relaxed));
}

std::span<std::byte> TempArena::get(std::size_t bytes) {
  if (bytes > (SIZE_MAX >> 2)) throw std::bad_alloc();  // rounding it would overflow
  const std::size_t have = capacity_.load(std::memory_order_relaxed);
  if (bytes <= have && p_ != nullptr) return {p_, bytes};
  if (cap_bytes_ != 0 && bytes > cap_bytes_) {
    throw CapacityError(bytes, cap_bytes_,
                        "ordo::TempArena::get(" + std::to_string(bytes) + "): over the arena's cap of " +
                            std::to_string(cap_bytes_) + " bytes (TempSpaceOptions::cap_bytes)");
  }
  std::size_t want = (std::max<std::size_t>(bytes, 1) + page_ - 1) / page_ * page_;
  if (cap_bytes_ != 0) want = std::min(want, std::max(cap_bytes_, bytes));
  void* fresh = allocator_->allocate(want, page_);  // the old block stays if this throws
  if (p_ != nullptr) allocator_->deallocate(p_, have);
  p_ = static_cast<std::byte*>(fresh);
  capacity_.store(want, std::memory_order_relaxed);
  return {p_, bytes};
}

TempSpace::TempSpace(Engine& engine, TempSpaceOptions options) : engine_(engine), opts_(std::move(options)) {
  if (opts_.arenas == 0) throw Error(Errc::invalid_argument, "ordo::TempSpace: TempSpaceOptions::arenas must be > 0");
  if (!std::has_single_bit(opts_.page)) {
    throw Error(Errc::invalid_argument, "ordo::TempSpace: TempSpaceOptions::page must be a power of two");
  }
  if (!opts_.allocator) opts_.allocator = HostAllocator::system();
  arenas_.reserve(opts_.arenas);
  try {
    for (unsigned i = 0; i < opts_.arenas; ++i) {
      const Var v = engine_.new_variable();
      try {
        arenas_.push_back(std::unique_ptr<TempArena>(new TempArena(v, opts_)));
      } catch (...) {
        engine_.delete_variable(v);
        throw;
      }
    }
  } catch (...) {
    for (auto& a : arenas_) delete_after_ops(engine_, a->var(), std::move(a));
    throw;
  }
}

TempSpace::~TempSpace() {
  for (auto& a : arenas_) {
    const Var v = a->var();
    delete_after_ops(engine_, v, std::move(a));
  }
}

TempArena& TempSpace::next() noexcept {
  return *arenas_[next_.fetch_add(1, std::memory_order_relaxed) % arenas_.size()];
}

std::size_t TempSpace::reserved_bytes() const noexcept {
  std::size_t n = 0;
  for (const auto& a : arenas_) n += a->capacity();
  return n;
}

// ---------------------------------------------------------------- RandomStream

RandomStream::RandomStream(Engine& engine, std::uint64_t seed)
    : engine_(engine), var_(engine.new_variable()), seed_(seed), gen_(seed) {}

RandomStream::~RandomStream() {
  if (var_.empty()) return;  // owned by RandomStreams: its deleter is destroying it
  try {
    engine_.delete_variable(var_);
  } catch (...) {
  }
}

RandomStreams::RandomStreams(Engine& engine, std::uint64_t seed, std::size_t n) : engine_(engine) {
  if (n == 0) throw Error(Errc::invalid_argument, "ordo::RandomStreams: needs at least one stream");
  streams_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) streams_.push_back(std::make_unique<RandomStream>(engine, seed + i));
}

RandomStreams::~RandomStreams() {
  for (auto& s : streams_) {
    const Var v = std::exchange(s->var_, Var{});
    delete_after_ops(engine_, v, std::move(s));
  }
}

}  // namespace ordo
