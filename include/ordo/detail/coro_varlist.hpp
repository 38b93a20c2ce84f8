// ordo/detail/coro_varlist.hpp - ordo::reads / ordo::writes: small owning
// variable lists for the coroutine API. Included by ordo/coro.hpp.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <type_traits>
#include <memory>
#include <new>
#include <utility>

#include "ordo/var.hpp"

namespace ordo {

namespace detail {
struct ReadsTag {};
struct WritesTag {};
}  // namespace detail

/// An owning list of variables: up to kInline stored inline, more on the
/// heap. Built by ordo::reads(...) / ordo::writes(...), which exist because
/// g++ 12 rejects braced lists inside co_await expressions; the two list
/// types are distinct so that reads and writes cannot be swapped by mistake.
/// A contiguous range of Var, so it converts to VarSpan wherever the engine
/// wants one.
///
/// @par Thread safety
/// A value type: distinct objects may be used concurrently; one object may be
/// read (not modified) by several threads.
template <class Tag>
class VarList {
 public:
  static constexpr std::size_t kInline = 8;

  VarList() noexcept {}  // inline_ left uninitialised: the first size_ entries are constructed as added
  explicit VarList(VarSpan vars) { assign(vars.begin(), vars.size()); }
  VarList(const VarList& o) { assign(o.data(), o.size_); }
  VarList(VarList&& o) noexcept { take(o); }
  VarList& operator=(const VarList& o) {
    if (this != &o) {
      VarList copy(o);
      clear_storage();
      take(copy);
    }
    return *this;
  }
  VarList& operator=(VarList&& o) noexcept {
    if (this != &o) {
      clear_storage();
      take(o);
    }
    return *this;
  }
  ~VarList() { delete[] heap_; }

  void push_back(const Var& v) {
    if (size_ == capacity()) grow(size_ * 2);
    ::new (static_cast<void*>(data_mut() + size_)) Var(v);
    ++size_;
  }

  [[nodiscard]] const Var* data() const noexcept { return heap_ != nullptr ? heap_ : inline_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] const Var* begin() const noexcept { return data(); }
  [[nodiscard]] const Var* end() const noexcept { return data() + size_; }
  const Var& operator[](std::size_t i) const noexcept { return data()[i]; }
  /// The list as a (non-owning) VarSpan.
  [[nodiscard]] VarSpan span() const noexcept { return VarSpan(std::span<const Var>(data(), size_)); }

 private:
  [[nodiscard]] std::size_t capacity() const noexcept { return heap_ != nullptr ? heap_cap_ : kInline; }
  Var* data_mut() noexcept { return heap_ != nullptr ? heap_ : inline_; }
  void grow(std::size_t cap) {
    Var* p = new Var[cap];
    std::copy(data(), data() + size_, p);
    delete[] heap_;
    heap_ = p;
    heap_cap_ = cap;
  }
  void assign(const Var* p, std::size_t n) {
    if (n > kInline) grow(n);
    std::uninitialized_copy(p, p + n, data_mut());
    size_ = n;
  }
  void take(VarList& o) noexcept {
    size_ = o.size_;
    heap_cap_ = o.heap_cap_;
    heap_ = std::exchange(o.heap_, nullptr);
    if (heap_ == nullptr) std::uninitialized_copy(o.inline_, o.inline_ + size_, inline_);
    o.size_ = 0;
    o.heap_cap_ = 0;
  }
  void clear_storage() noexcept {
    delete[] heap_;
    heap_ = nullptr;
    heap_cap_ = 0;
    size_ = 0;
  }

  // Not default-initialised (a list of one variable would otherwise clear
  // all eight slots): Var is trivially copyable and destructible.
  static_assert(std::is_trivially_copyable_v<Var> && std::is_trivially_destructible_v<Var>);
  union {
    Var inline_[kInline];
  };
  Var* heap_ = nullptr;
  std::size_t heap_cap_ = 0;
  std::size_t size_ = 0;
};

/// The variables an op reads.
using Reads = VarList<detail::ReadsTag>;
/// The variables an op mutates.
using Writes = VarList<detail::WritesTag>;

/// `ordo::reads(a, b)`: the variables an op reads (none: `ordo::reads()`).
template <class... V>
  requires(std::same_as<std::remove_cvref_t<V>, Var> && ...)
[[nodiscard]] Reads reads(const V&... vars) {
  Reads r;
  (r.push_back(vars), ...);
  return r;
}
/// A run-time list (a std::vector<Var>, a span, ...).
[[nodiscard]] inline Reads reads(VarSpan vars) { return Reads(vars); }

/// `ordo::writes(c)`: the variables an op mutates (none: `ordo::writes()`).
template <class... V>
  requires(std::same_as<std::remove_cvref_t<V>, Var> && ...)
[[nodiscard]] Writes writes(const V&... vars) {
  Writes w;
  (w.push_back(vars), ...);
  return w;
}
/// A run-time list (a std::vector<Var>, a span, ...).
[[nodiscard]] inline Writes writes(VarSpan vars) { return Writes(vars); }

}  // namespace ordo
