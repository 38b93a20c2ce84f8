// ordo/on_complete.hpp - the completion callback handed to async ops.
#pragma once

#include <cstdint>
#include <exception>

namespace ordo {

namespace detail {
struct OpRecord;
struct ErrorRecord;
class ErrorRef;
struct EngineExtension;
}

/// Completes an async op. Call it exactly once, from any thread, when the
/// op's work is finished: `done()` for success, `done(std::current_exception())`
/// (or any exception_ptr) for failure. The op's variables are released and its
/// dependants dispatched by that call.
///
/// Copies are cheap (three words) and all refer to the same op; the first call
/// wins and any later call throws ordo::Error{Errc::double_completion}, whose
/// what() names the op (OpAttrs::name: keep it alive as long as copies of its
/// OnComplete may be called; a string literal is ideal). The check uses a
/// generation number, so a stale copy kept past completion is detected,
/// never undefined behaviour.
///
/// @par Thread safety
/// Any thread may call it, concurrently with anything else the engine does.
/// The call does bookkeeping only: dependants it makes ready go to the
/// engine's workers, they never run on the calling thread unless it is
/// itself a worker of the engine. Exception: the naive engine, serial by
/// design, runs them on the calling thread, unless that thread is inside an
/// ordo::CompletionThread scope (an I/O reaper), where they go to its helper.
class OnComplete {
 public:
  OnComplete() = default;
  void operator()() const { finish(nullptr); }
  void operator()(std::exception_ptr error) const { finish(std::move(error)); }
  /// Two copies of one op's completion (the same op, the same push).
  friend bool operator==(const OnComplete& a, const OnComplete& b) noexcept {
    return a.op_ == b.op_ && a.gen_ == b.gen_;
  }

 private:
  friend struct detail::OpRecord;
  friend class detail::ErrorRef;
  friend struct detail::EngineExtension;
  OnComplete(detail::OpRecord* op, std::uint64_t gen, const char* name) noexcept : op_(op), gen_(gen), name_(name) {}
  /// `kept`: if not null, receives a reference to the error stored (detail::ErrorRef::fail).
  void finish(std::exception_ptr error, detail::ErrorRecord** kept = nullptr) const;

  detail::OpRecord* op_ = nullptr;
  std::uint64_t gen_ = 0;
  /// The op's name, kept here: a second call must not read the record, which
  /// may be another op's by then.
  const char* name_ = nullptr;
};

}  // namespace ordo
