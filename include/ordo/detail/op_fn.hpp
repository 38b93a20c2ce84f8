// ordo/detail/op_fn.hpp - type-erased op body with inline storage, so that
// pushing a small lambda allocates nothing.
#pragma once

#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "ordo/context.hpp"
#include "ordo/on_complete.hpp"

namespace ordo::detail {

template <class F>
inline constexpr bool is_sync_fn_v =
    std::is_invocable_v<F&, const RunContext&> || std::is_invocable_v<F&>;
template <class F>
inline constexpr bool is_async_fn_v = std::is_invocable_v<F&, const RunContext&, OnComplete>;

/// Calls a sync body, `void(RunContext)` or `void()`.
template <class D>
inline void call_sync(D& f, const RunContext& rc) {
  if constexpr (std::is_invocable_v<D&, const RunContext&>) {
    f(rc);
  } else {
    f();
  }
}

/// Holds one callable, either a sync body `void(RunContext)` / `void()` or an
/// async body `void(RunContext, OnComplete)`. Callables up to kInlineSize
/// bytes live inline (40: a lambda capturing five references or pointers).
/// Not thread-safe; owned by exactly one op or operator record.
class OpFn {
 public:
  static constexpr std::size_t kInlineSize = 40;

  OpFn() noexcept = default;
  OpFn(const OpFn&) = delete;
  OpFn& operator=(const OpFn&) = delete;
  /// Takes `o`'s callable (which then is empty): a captured graph moves its
  /// bodies into one array, in push order, so that a replay reads them as a
  /// stream (docs/graphs.md).
  OpFn(OpFn&& o) noexcept : vt_(o.vt_) {
    if (vt_ != nullptr) {
      vt_->relocate(o.buf_, buf_);
      o.vt_ = nullptr;
    }
  }
  OpFn& operator=(OpFn&&) = delete;
  ~OpFn() { reset(); }

  template <class F>
  void emplace(F&& f) {
    using D = std::decay_t<F>;
    static_assert(is_sync_fn_v<D> || is_async_fn_v<D>,
                  "an op body must be callable as void(RunContext), void() or "
                  "void(RunContext, OnComplete)");
    if constexpr (sizeof(D) <= kInlineSize && alignof(D) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<D>) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(f));
      vt_ = &kInlineVt<D>;
    } else {
      D* p = new D(std::forward<F>(f));
      ::new (static_cast<void*>(buf_)) D*(p);
      vt_ = &kHeapVt<D>;
    }
  }

  [[nodiscard]] bool empty() const noexcept { return vt_ == nullptr; }
  [[nodiscard]] bool is_async() const noexcept { return vt_->async != nullptr; }
  /// The held callable's type, as an address: equal for two bodies of one
  /// type (ordo::AutoCapture compares an iteration's bodies with the ones it
  /// learned by it); null when empty.
  [[nodiscard]] const void* type() const noexcept { return vt_; }
  void invoke_sync(const RunContext& rc) { vt_->sync(buf_, rc); }
  void invoke_async(const RunContext& rc, OnComplete done) { vt_->async(buf_, rc, done); }
  void reset() noexcept {
    if (vt_ != nullptr) {
      const VTable* vt = vt_;
      vt_ = nullptr;
      vt->destroy(buf_);
    }
  }

 private:
  struct VTable {
    void (*sync)(void*, const RunContext&);
    void (*async)(void*, const RunContext&, OnComplete);
    void (*destroy)(void*) noexcept;
    void (*relocate)(void* from, void* to) noexcept;  ///< moves the callable and ends it at `from`
  };

  template <class D>
  static D& get_inline(void* p) noexcept { return *std::launder(static_cast<D*>(p)); }
  template <class D>
  static D& get_heap(void* p) noexcept { return **std::launder(static_cast<D**>(p)); }

  template <class D, D& (*Get)(void*) noexcept>
  static constexpr VTable make_vt(void (*destroy)(void*) noexcept, void (*relocate)(void*, void*) noexcept) {
    VTable vt{nullptr, nullptr, destroy, relocate};
    if constexpr (is_async_fn_v<D>) {
      vt.async = [](void* p, const RunContext& rc, OnComplete done) { Get(p)(rc, done); };
    } else {
      vt.sync = [](void* p, const RunContext& rc) { call_sync(Get(p), rc); };
    }
    return vt;
  }

  template <class D>
  static void destroy_inline(void* p) noexcept { get_inline<D>(p).~D(); }
  template <class D>
  static void destroy_heap(void* p) noexcept { delete &get_heap<D>(p); }

  template <class D>
  static void relocate_inline(void* from, void* to) noexcept {
    D& f = get_inline<D>(from);
    ::new (to) D(std::move(f));
    f.~D();
  }
  static void relocate_heap(void* from, void* to) noexcept { std::memcpy(to, from, sizeof(void*)); }

  template <class D>
  static constexpr VTable kInlineVt = make_vt<D, &get_inline<D>>(&destroy_inline<D>, &relocate_inline<D>);
  template <class D>
  static constexpr VTable kHeapVt = make_vt<D, &get_heap<D>>(&destroy_heap<D>, &relocate_heap);

  alignas(std::max_align_t) unsigned char buf_[kInlineSize];
  const VTable* vt_ = nullptr;
};

}  // namespace ordo::detail
