// ordo/detail/error_ref.hpp - an engine error as a layer's waiter holds it.
// Internal: for the layers (coroutines, ordo::asio) that hand an op's
// exception to a waiter of their own.
#pragma once

#include <exception>
#include <utility>

#include "ordo/on_complete.hpp"

namespace ordo::detail {

struct ErrorRecord;  // src/core/records.hpp

/// One counted reference to an error the engine stored. The engine rethrows
/// an error from wait_for_all, or reports it at destruction, only if no
/// waiter got it first (docs/guide.md, "Errors and exceptions"). A layer that
/// hands the exception to a waiter of its own (an awaiting coroutine, an Asio
/// handler) keeps an ErrorRef beside it and calls observe() when it does.
/// The record outlives the engine if need be: an ErrorRef may be dropped
/// anywhere, at any time.
///
/// @par Thread safety
/// One owner at a time; observe() may race with the engine's waits.
class ErrorRef {
 public:
  ErrorRef() noexcept = default;
  ErrorRef(ErrorRef&& o) noexcept : rec_(std::exchange(o.rec_, nullptr)) {}
  ErrorRef& operator=(ErrorRef&& o) noexcept {
    std::swap(rec_, o.rec_);
    return *this;
  }
  ErrorRef(const ErrorRef&) = delete;
  ErrorRef& operator=(const ErrorRef&) = delete;
  ~ErrorRef() {
    if (rec_ != nullptr) drop(rec_);
  }

  /// Completes the op like done(error) and refers to the error it stored
  /// (none for a null `error`). Throws as done(error) does.
  static ErrorRef fail(const OnComplete& done, std::exception_ptr error);
  /// Inside the destructor of a skipped op body: the error that skipped it
  /// (the record behind Engine::skip_reason()). Empty anywhere else.
  static ErrorRef skipping() noexcept;
  /// A new reference to `r` (empty for null).
  static ErrorRef retained(ErrorRecord* r) noexcept;

  /// The stored exception (null when empty).
  [[nodiscard]] std::exception_ptr exception() const noexcept;
  /// A waiter got the exception: wait_for_all and the engine's destructor
  /// pass over it from now on. No effect when empty.
  void observe() const noexcept;

 private:
  explicit ErrorRef(ErrorRecord* r) noexcept : rec_(r) {}
  static void drop(ErrorRecord* r) noexcept;
  ErrorRecord* rec_ = nullptr;
};

}  // namespace ordo::detail
