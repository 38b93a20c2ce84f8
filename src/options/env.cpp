// src/options/env.cpp - the parsing of ORDO_* environment variables shared by every
// from_env() (ordo/detail/env.hpp).
#include "ordo/detail/env.hpp"

#include <charconv>
#include <cstdlib>
#include <string>

#include "ordo/error.hpp"

namespace ordo::detail {

namespace {

bool equals_lower(std::string_view text, std::string_view lower) noexcept {
  if (text.size() != lower.size()) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != lower[i]) return false;
  }
  return true;
}

}  // namespace

std::optional<bool> parse_bool(std::string_view text) noexcept {
  for (std::string_view on : {"1", "true", "on", "yes"}) {
    if (equals_lower(text, on)) return true;
  }
  for (std::string_view off : {"0", "false", "off", "no"}) {
    if (equals_lower(text, off)) return false;
  }
  return std::nullopt;
}

std::optional<std::string_view> env_value(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string_view(value);
}

void bad_env(const char* name, std::string_view value, std::string_view what, std::string_view expected) {
  std::string message(name);
  message.append("='").append(value).append("' is not ").append(what).append(": use ").append(expected);
  throw Error(Errc::invalid_argument, message);
}

void env_bool(const char* name, bool& flag) {
  const std::optional<std::string_view> text = env_value(name);
  if (!text) return;
  const std::optional<bool> parsed = parse_bool(*text);
  if (!parsed) bad_env(name, *text, "on or off", "1/0, true/false, on/off or yes/no");
  flag = *parsed;
}

void env_integer(const char* name, std::uint64_t& out, std::uint64_t min, std::uint64_t max) {
  const std::optional<std::string_view> text = env_value(name);
  if (!text) return;
  std::uint64_t parsed = 0;
  const char* end = text->data() + text->size();
  const auto [stop, ec] = std::from_chars(text->data(), end, parsed);
  if (ec != std::errc{} || stop != end || parsed < min || parsed > max) {
    bad_env(name, *text, "an integer in range",
            "a decimal integer from " + std::to_string(min) + " to " + std::to_string(max));
  }
  out = parsed;
}

}  // namespace ordo::detail
