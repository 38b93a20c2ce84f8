// ordo/error.hpp - the one exception type the engine throws for misuse.
#pragma once

#include <stdexcept>
#include <string>

namespace ordo {

/// What kind of misuse or engine-level failure an ordo::Error reports.
enum class Errc {
  empty_var,           ///< a default-constructed Var was passed where a variable is needed
  deleted_var,         ///< the variable was deleted (its generation no longer matches)
  foreign_var,         ///< the variable belongs to another engine
  deleted_operator,    ///< the operator was deleted or belongs to another engine
  double_completion,   ///< an async op's completion callback was called a second time
  wait_inside_op,      ///< a blocking wait was called from inside an op of the same engine
  invalid_argument,    ///< a bad option or argument (message says which)
  shutdown_abandoned,  ///< engine destroyed while async ops never completed (reported, not thrown)
  cancelled,           ///< work was cancelled before it ran
  closed,              ///< a send on a closed ordo::Channel
  timed_out,           ///< a deadline passed first (ordo::with_timeout)
  shutting_down,       ///< a push reached an engine whose destructor had begun (refused)
  deadlock,            ///< a wait that could never end (a coroutine awaiting an op behind its own lease)
};

/// Thrown for misuse of the engine (never for an op's own exception, which is
/// rethrown unchanged). `code()` tells which rule was broken; `what()` names
/// the op or variable involved where one is known.
class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  [[nodiscard]] Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

}  // namespace ordo
