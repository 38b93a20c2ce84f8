// examples/kv_resp_redis.hpp - Redis's own conversions, for kv_server's RESP
// mode to answer byte for byte as redis-server 7.0 does: the strict integer
// form (string2ll), long doubles for INCRBYFLOAT (string2ld, ld2string) and
// glob patterns for KEYS / SCAN MATCH (stringmatchlen). Each follows the
// function of the same name in Redis's src/util.c. No Asio, no ordo.
#pragma once

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

namespace kv::resp {

/// Milliseconds since the Unix epoch: Redis's mstime(). Deadlines are kept
/// on this clock, as Redis keeps them (EXPIREAT takes them as they are).
inline std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// The canonical decimal form only: no sign but a leading '-', no leading
/// zero, no "-0", no spaces, at most 20 characters, within int64.
inline bool string2ll(std::string_view s, std::int64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  if (s.size() == 1 && s[0] == '0') {
    out = 0;
    return true;
  }
  std::size_t i = 0;
  bool negative = false;
  if (s[0] == '-') {
    negative = true;
    if (s.size() == 1) return false;
    i = 1;
  }
  if (s[i] < '1' || s[i] > '9') return false;
  std::uint64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    const std::uint64_t d = static_cast<std::uint64_t>(s[i] - '0');
    if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  if (negative) {
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + 1) return false;
    out = static_cast<std::int64_t>(0 - v);
  } else {
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    out = static_cast<std::int64_t>(v);
  }
  return true;
}

/// strtold over the whole string (a NUL byte inside fails it), refusing
/// leading spaces, NaN and overflow.
inline bool string2ld(std::string_view s, long double& out) {
  constexpr std::size_t kMax = 5 * 1024;
  if (s.empty() || s.size() >= kMax) return false;
  char buf[kMax];
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  errno = 0;
  char* end = nullptr;
  const long double v = std::strtold(buf, &end);
  if (std::isspace(static_cast<unsigned char>(buf[0])) || end[0] != '\0' || static_cast<std::size_t>(end - buf) != s.size() ||
      (errno == ERANGE && (v == HUGE_VALL || v == -HUGE_VALL || std::fpclassify(v) == FP_ZERO)) || std::isnan(v)) {
    return false;
  }
  out = v;
  return true;
}

/// "%.17Lf" without trailing zeros (Redis's LD_STR_HUMAN).
inline std::string ld2string(long double v) {
  char buf[5 * 1024];
  int l = std::snprintf(buf, sizeof buf, "%.17Lf", v);
  if (l <= 0 || static_cast<std::size_t>(l) + 1 > sizeof buf) return {};
  if (std::strchr(buf, '.') != nullptr) {
    char* p = buf + l - 1;
    while (*p == '0') {
      --p;
      --l;
    }
    if (*p == '.') --l;
  }
  if (l == 2 && buf[0] == '-' && buf[1] == '0') {
    buf[0] = '0';
    l = 1;
  }
  return std::string(buf, static_cast<std::size_t>(l));
}

/// Glob-style matching: * ? [abc] [^a-z] and \x, case-sensitive.
inline bool stringmatch(const char* pattern, std::size_t plen, const char* str, std::size_t slen, int depth = 0) {
  if (depth > 1000) return false;  // Redis's guard against deep recursion on many '*'
  while (plen != 0 && slen != 0) {
    switch (pattern[0]) {
      case '*':
        while (plen > 1 && pattern[1] == '*') {
          ++pattern;
          --plen;
        }
        if (plen == 1) return true;
        while (slen != 0) {
          if (stringmatch(pattern + 1, plen - 1, str, slen, depth + 1)) return true;
          ++str;
          --slen;
        }
        return false;
      case '?':
        ++str;
        --slen;
        break;
      case '[': {
        ++pattern;
        --plen;
        const bool negate = plen != 0 && pattern[0] == '^';
        if (negate) {
          ++pattern;
          --plen;
        }
        bool match = false;
        for (;;) {
          if (plen == 0) {
            --pattern;
            ++plen;
            break;
          }
          if (pattern[0] == '\\' && plen >= 2) {
            ++pattern;
            --plen;
            if (pattern[0] == str[0]) match = true;
          } else if (pattern[0] == ']') {
            break;
          } else if (plen >= 3 && pattern[1] == '-') {
            int start = pattern[0];  // plain char, as Redis compares them
            int end = pattern[2];
            const int c = str[0];
            if (start > end) std::swap(start, end);
            pattern += 2;
            plen -= 2;
            if (c >= start && c <= end) match = true;
          } else if (pattern[0] == str[0]) {
            match = true;
          }
          ++pattern;
          --plen;
        }
        if (negate) match = !match;
        if (!match) return false;
        ++str;
        --slen;
        break;
      }
      case '\\':
        if (plen >= 2) {
          ++pattern;
          --plen;
        }
        [[fallthrough]];
      default:
        if (pattern[0] != str[0]) return false;
        ++str;
        --slen;
        break;
    }
    ++pattern;
    --plen;
    if (slen == 0) {
      while (plen != 0 && pattern[0] == '*') {
        ++pattern;
        --plen;
      }
      break;
    }
  }
  return plen == 0 && slen == 0;
}
inline bool stringmatch(std::string_view pattern, std::string_view s) {
  return stringmatch(pattern.data(), pattern.size(), s.data(), s.size());
}

}  // namespace kv::resp
