// ordo/var.hpp - variable handles and lists of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <ranges>
#include <span>
#include <type_traits>

namespace ordo {

namespace detail {
struct VarRecord;
}

/// A handle to an engine variable: the token an op names to declare what it
/// reads or mutates. Copying is free (two words); the variable lives until
/// Engine::delete_variable. A handle to a deleted variable is detected by a
/// generation check and rejected with ordo::Error{Errc::deleted_var}.
///
/// @par Thread safety
/// A Var is an immutable value: any number of threads may copy and use it.
class Var {
 public:
  constexpr Var() noexcept = default;

  [[nodiscard]] constexpr bool empty() const noexcept { return rec_ == nullptr; }
  constexpr explicit operator bool() const noexcept { return rec_ != nullptr; }
  /// A small number unique among the live variables of an engine (for printing).
  [[nodiscard]] std::uint32_t id() const noexcept { return id_; }

  friend constexpr bool operator==(const Var& a, const Var& b) noexcept {
    return a.rec_ == b.rec_ && a.gen_ == b.gen_;
  }
  friend constexpr bool operator<(const Var& a, const Var& b) noexcept {
    return std::less<>{}(a.rec_, b.rec_) || (a.rec_ == b.rec_ && a.gen_ < b.gen_);
  }

 private:
  friend struct detail::VarRecord;
  friend class Engine;
  constexpr Var(detail::VarRecord* r, std::uint32_t gen, std::uint32_t id) noexcept
      : rec_(r), gen_(gen), id_(id) {}

  detail::VarRecord* rec_ = nullptr;
  std::uint32_t gen_ = 0;
  std::uint32_t id_ = 0;
};

/// A non-owning view of variables, accepted wherever the engine wants a
/// list: `{a, b}`, a single `a`, a `std::vector<Var>`, an array or a span.
/// Duplicates are allowed; the engine removes them.
class VarSpan {
 public:
  constexpr VarSpan() noexcept = default;
  // The list lives until the end of the full expression that calls push: long enough.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  constexpr VarSpan(std::initializer_list<Var> il) noexcept : p_(il.begin()), n_(il.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  constexpr VarSpan(const Var& v) noexcept : p_(&v), n_(1) {}  // NOLINT: implicit on purpose
  constexpr VarSpan(std::span<const Var> s) noexcept : p_(s.data()), n_(s.size()) {}
  template <class R>
    requires(std::ranges::contiguous_range<const R> && std::ranges::sized_range<const R> &&
             std::is_same_v<std::ranges::range_value_t<R>, Var>)
  constexpr VarSpan(const R& r) noexcept : p_(std::ranges::data(r)), n_(std::ranges::size(r)) {}

  [[nodiscard]] constexpr const Var* begin() const noexcept { return p_; }
  [[nodiscard]] constexpr const Var* end() const noexcept { return p_ + n_; }
  [[nodiscard]] constexpr std::size_t size() const noexcept { return n_; }
  [[nodiscard]] constexpr bool empty() const noexcept { return n_ == 0; }
  constexpr const Var& operator[](std::size_t i) const noexcept { return p_[i]; }

 private:
  const Var* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace ordo
