// ordo/detail/env.hpp - how ORDO_* environment variables are parsed, for the
// from_env() functions only (Options::from_env, io::IoOptions::from_env): one
// spelling of on/off and of numbers for every variable, and one error format
// ("NAME='value' is not ...: use ..."). Internal; not for user code.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ordo::detail {

/// 1/true/on/yes -> true, 0/false/off/no -> false, in any case; nullopt for
/// anything else (the empty string included).
[[nodiscard]] std::optional<bool> parse_bool(std::string_view text) noexcept;

/// The value of variable `name`, or nullopt when it is not set.
[[nodiscard]] std::optional<std::string_view> env_value(const char* name);

/// Throws ordo::Error{Errc::invalid_argument}:
/// "NAME='value' is not <what>: use <expected>".
[[noreturn]] void bad_env(const char* name, std::string_view value, std::string_view what, std::string_view expected);

/// Sets `flag` from variable `name` when it is set (parse_bool); any other
/// value throws (bad_env).
void env_bool(const char* name, bool& flag);

/// Sets `out` from variable `name` when it is set: a decimal integer from
/// `min` to `max`, nothing else (no sign, no blanks); anything else throws
/// (bad_env).
void env_integer(const char* name, std::uint64_t& out, std::uint64_t min, std::uint64_t max);

/// env_integer for any unsigned field, bounded by its type unless told.
template <class T>
void env_integer(const char* name, T& out, T min = 0, T max = static_cast<T>(-1)) {
  static_assert(static_cast<T>(-1) > T{0}, "unsigned fields only");
  std::uint64_t v = out;
  env_integer(name, v, min, max);
  out = static_cast<T>(v);
}

}  // namespace ordo::detail
