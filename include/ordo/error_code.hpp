// ordo/error_code.hpp - ordo::Errc as a std::error_code enum.
//
// Lets code that speaks std::error_code (Asio completion handlers,
// asio::redirect_error users, std::system_error catch sites) compare against
// ordo's error kinds:
//
//   std::error_code ec = ordo::Errc::cancelled;      // implicit, via make_error_code
//   if (ec == ordo::Errc::cancelled) ...
//   ec.category().name();                            // "ordo"
//   ordo::error_code_of(err);                        // the code of an ordo::Error
//
// Header-only; the category is one inline object per program.
#pragma once

#include <string>
#include <system_error>

#include "ordo/error.hpp"

namespace ordo {

/// The std::error_category of ordo::Errc values. name() is "ordo";
/// message(v) describes the Errc with value v.
///
/// @par Thread safety
/// Immutable; any thread may use it.
class ErrcCategory final : public std::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "ordo"; }
  [[nodiscard]] std::string message(int v) const override {
    switch (static_cast<Errc>(v)) {
      case Errc::empty_var: return "empty variable handle";
      case Errc::deleted_var: return "variable was deleted";
      case Errc::foreign_var: return "variable belongs to another engine";
      case Errc::deleted_operator: return "operator was deleted or belongs to another engine";
      case Errc::double_completion: return "async op completed twice";
      case Errc::wait_inside_op: return "blocking wait inside an op of the same engine";
      case Errc::invalid_argument: return "invalid argument";
      case Errc::shutdown_abandoned: return "async op abandoned at engine shutdown";
      case Errc::cancelled: return "cancelled before it ran";
      case Errc::closed: return "channel closed";
      case Errc::timed_out: return "deadline passed";
      case Errc::shutting_down: return "engine is being destroyed";
      case Errc::deadlock: return "wait that could never end";
    }
    return "unknown ordo error " + std::to_string(v);
  }
};

/// The one ErrcCategory object.
[[nodiscard]] inline const std::error_category& errc_category() noexcept {
  static const ErrcCategory category;
  return category;
}

/// Found by argument-dependent lookup when an Errc converts to std::error_code.
[[nodiscard]] inline std::error_code make_error_code(Errc e) noexcept {
  return {static_cast<int>(e), errc_category()};
}

/// The error_code of an ordo::Error (its Errc in the ordo category).
[[nodiscard]] inline std::error_code error_code_of(const Error& e) noexcept { return make_error_code(e.code()); }

}  // namespace ordo

template <>
struct std::is_error_code_enum<ordo::Errc> : std::true_type {};
