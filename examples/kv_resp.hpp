// examples/kv_resp.hpp - the Redis serialization protocol (RESP2) for the
// RESP mode of kv_server (examples/kv_resp_server.hpp): an incremental
// request parser with size limits, and reply encoders. No Asio, no ordo.
//
// A request is a multibulk array of bulk strings (what redis-cli and
// redis-benchmark send: "*2\r\n$3\r\nGET\r\n$1\r\na\r\n") or an inline
// command (one line of words, for telnet). Arguments are binary-safe.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kv::resp {

struct Limits {
  /// The most bytes one request may take (its frame, headers included); a
  /// longer one is refused with an error and its connection closed.
  std::size_t max_request_bytes = 16U << 20;
  /// The longest inline command line, and the longest header line.
  std::size_t max_inline_bytes = 64U << 10;
  /// The most arguments one request may carry.
  std::size_t max_args = 1U << 20;
};

enum class Status {
  complete,    ///< argv holds one request; pos moved past it (argv may be empty: nothing to do)
  incomplete,  ///< more bytes are needed; pos moved past the elements taken so far
  error,       ///< malformed or too large: err holds the message (without "-ERR ")
};

inline bool parse_int(std::string_view s, std::int64_t& out) {
  if (s.empty()) return false;
  const char* b = s.data();
  if (*b == '+') return false;  // from_chars refuses it anyway; be explicit
  auto [p, ec] = std::from_chars(b, b + s.size(), out);
  return ec == std::errc{} && p == b + s.size();
}

/// A multibulk request taken in part: the elements that have arrived. Kept
/// between parse() calls so that each byte is parsed once however slowly a
/// request arrives (re-parsing from the request's start cost quadratic CPU).
struct Partial {
  std::int64_t remaining = -1;  ///< elements still to come (-1: between requests)
  std::size_t bytes = 0;        ///< bytes of the request taken so far
  std::vector<std::string> argv;
  void reset() {
    remaining = -1;
    bytes = 0;
    argv.clear();
  }
};

/// Parses one request from in[pos..], resuming `part`. Elements are moved
/// into `part` as they complete, and pos past them, so the caller may drop
/// in[..pos). Never reads past in.size().
inline Status parse(std::string_view in, std::size_t& pos, Partial& part, std::vector<std::string>& argv,
                    std::string& err, const Limits& lim) {
  argv.clear();
  auto fail = [&](std::string msg) {
    part.reset();
    err = "Protocol error: " + std::move(msg);
    return Status::error;
  };
  std::size_t p = pos;
  // "<prefix><number>\r\n" at p: the number, or incomplete / error.
  auto header = [&](char prefix, std::int64_t& n, Status& st) -> bool {
    if (p >= in.size()) {
      st = Status::incomplete;
      return false;
    }
    if (in[p] != prefix) {
      st = fail(std::string("expected '") + prefix + "', got '" + in[p] + "'");
      return false;
    }
    const std::size_t eol = in.find("\r\n", p);
    if (eol == std::string_view::npos) {
      st = in.size() - p > lim.max_inline_bytes ? fail("too big header line") : Status::incomplete;
      return false;
    }
    if (!parse_int(in.substr(p + 1, eol - p - 1), n)) {
      st = fail(prefix == '*' ? "invalid multibulk length" : "invalid bulk length");
      return false;
    }
    p = eol + 2;
    return true;
  };
  Status st = Status::incomplete;
  if (part.remaining < 0) {
    if (pos >= in.size()) return Status::incomplete;
    if (in[p] != '*') {
      // Inline command: words separated by spaces, up to "\n" (a "\r" before it is dropped).
      const std::size_t nl = in.find('\n', p);
      if (nl == std::string_view::npos) {
        if (in.size() - p > lim.max_inline_bytes) return fail("too big inline request");
        return Status::incomplete;
      }
      if (nl - p > lim.max_inline_bytes) return fail("too big inline request");
      std::string_view line = in.substr(p, nl - p);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      std::size_t i = 0;
      while (i < line.size()) {
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
        std::size_t j = i;
        while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
        if (j > i) {
          if (argv.size() >= lim.max_args) return fail("too many arguments");
          argv.emplace_back(line.substr(i, j - i));
        }
        i = j;
      }
      pos = nl + 1;
      return Status::complete;
    }
    std::int64_t count = 0;
    if (!header('*', count, st)) return st;
    if (count > static_cast<std::int64_t>(lim.max_args)) return fail("invalid multibulk length");
    if (count <= 0) {  // "*0" / "*-1": an empty request, ignored as Redis does
      pos = p;
      return Status::complete;
    }
    part.remaining = count;
    part.bytes = p - pos;
    part.argv.clear();
    // Room for the elements the bytes at hand can hold (each takes at least
    // "$0\r\n\r\n"), not for the count a header claims: a bare "*1048576"
    // must not cost 32 MB; argv grows as elements arrive.
    part.argv.reserve(std::min(static_cast<std::size_t>(count), (in.size() - p) / 6));
    pos = p;
  }
  while (part.remaining > 0) {
    p = pos;
    std::int64_t len = 0;
    if (!header('$', len, st)) return st;
    if (len < 0) return fail("invalid bulk length");
    if (static_cast<std::uint64_t>(len) > lim.max_request_bytes ||
        part.bytes + (p - pos) + static_cast<std::size_t>(len) + 2 > lim.max_request_bytes) {
      return fail("request larger than " + std::to_string(lim.max_request_bytes) + " bytes");
    }
    const auto n = static_cast<std::size_t>(len);
    if (in.size() - p < n + 2) return Status::incomplete;
    if (in[p + n] != '\r' || in[p + n + 1] != '\n') return fail("bulk string not terminated by CRLF");
    part.argv.emplace_back(in.substr(p, n));
    part.bytes += p - pos + n + 2;
    pos = p + n + 2;
    --part.remaining;
  }
  argv.swap(part.argv);
  part.reset();
  return Status::complete;
}

/// parse() of one request from its start: on incomplete, pos is left where
/// it was (for callers that hold the whole request, such as tests).
inline Status parse(std::string_view in, std::size_t& pos, std::vector<std::string>& argv, std::string& err,
                    const Limits& lim) {
  Partial part;
  const std::size_t start = pos;
  const Status st = parse(in, pos, part, argv, err, lim);
  if (st == Status::incomplete) pos = start;
  return st;
}

// Reply encoders: each appends one RESP2 value to `o`.
inline void simple(std::string& o, std::string_view s) {
  o += '+';
  o += s;
  o += "\r\n";
}
inline void error(std::string& o, std::string_view msg) {  // msg starts with its code: "ERR ...", "WRONGTYPE ..."
  o += '-';
  o += msg;
  o += "\r\n";
}
/// A RESP line of a type byte and a number: ":5", "$3", "*2".
template <class Int>
inline void number_line(std::string& o, char type, Int n) {
  char b[24];
  auto r = std::to_chars(b, b + sizeof b, n);
  o += type;
  o.append(b, r.ptr);
  o += "\r\n";
}
inline void integer(std::string& o, std::int64_t n) { number_line(o, ':', n); }
inline void bulk(std::string& o, std::string_view s) {
  number_line(o, '$', s.size());
  o.append(s);
  o += "\r\n";
}
inline void null_bulk(std::string& o) { o += "$-1\r\n"; }
inline void array(std::string& o, std::size_t n) { number_line(o, '*', n); }

/// Encodes a request as a multibulk array (what clients send).
inline std::string request(const std::vector<std::string>& argv) {
  std::string o;
  array(o, argv.size());
  for (const auto& a : argv) bulk(o, a);
  return o;
}

}  // namespace kv::resp
