// examples/kv_resp_commands.hpp - the commands of kv_server's RESP mode:
// plan() parses a request's arguments into a Plan on the io thread;
// execute() (kv_resp_execute.hpp) runs it against the keyspace
// (kv_resp_keyspace.hpp) inside an op that reads or mutates the variables of
// the slots it is given.
//
// The string commands answer as redis-server 7.0 does, byte for byte
// (tests/resp/redis_diff_test.cpp compares them): the same argument checks
// in the same order, the same error texts, integers in Redis's canonical
// form only (kv_resp_redis.hpp).
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "kv_resp.hpp"
#include "kv_resp_info.hpp"
#include "kv_resp_keyspace.hpp"
#include "kv_resp_redis.hpp"

namespace kv::resp {

/// One request, checked and ready to run.
struct Plan {
  enum class Op : std::uint8_t {
    reply,  ///< `text` is the whole reply (errors found at planning, PING, COMMAND, stubs)
    echo, get, set, del, exists, incrby, mget, mset, append, strlen, pttl, ttl, dbsize, flushall,
    getdel, getrange, setrange, incrbyfloat, expire, persist, type, msetnx, rename, keys, scan, randomkey,
    object_encoding,
    info,          ///< INFO: `text` the sections but keyspace (Server::add), `num` the sections (kv_resp_info.hpp)
    spinset,       ///< SPINSET key value us: busy-work for `num` us, then SET (the per-request work bench)
    expire_sweep,  ///< internal: erase the keys whose deadline passed (never parsed from a request)
  };
  Op op = Op::reply;
  std::vector<std::string> argv;
  std::string text;              ///< reply ops: the reply; KEYS / SCAN: the pattern
  std::int64_t num = 0;          ///< INCRBY delta, SPINSET us, GETRANGE start, SETRANGE offset
  std::int64_t num2 = 0;         ///< GETRANGE end
  std::int64_t deadline_ms = 0;  ///< SET EX/PX/EXAT/PXAT, EXPIRE...: absolute deadline (now_ms() clock)
  std::uint8_t cond = 0;         ///< SET NX = 1, XX = 2; EXPIRE also GT = 4, LT = 8
  bool get = false;              ///< SET GET, GETSET: reply with the old value
  bool keepttl = false;          ///< SET KEEPTTL
  bool int_reply = false;        ///< SETNX: :1 / :0 where SET answers OK / nil
  bool writes = false;
  bool all_keys = false;  ///< DBSIZE, FLUSHALL, KEYS, SCAN, RANDOMKEY: every slot
  bool quit = false;      ///< QUIT: reply, then close the connection
  bool shutdown = false;  ///< SHUTDOWN: stop the server
  std::uint8_t key_step = 0;  ///< keys are argv[1], argv[1 + step], ... (0: none; one-key commands: argv[1] only)
  bool one_key = false;
  std::size_t nall = 0;  ///< all-key commands: the slots given (every slot at acceptance)

  /// Number of keys, and the i-th.
  [[nodiscard]] std::size_t key_count() const {
    if (key_step == 0) return 0;
    if (one_key) return 1;
    return (argv.size() - 1 + key_step - 1) / key_step;
  }
  [[nodiscard]] const std::string& key(std::size_t i) const { return argv[1 + i * key_step]; }
  /// Slots the op is given: one per key, or (all-key commands) `nall`.
  [[nodiscard]] std::size_t slot_count() const { return all_keys ? nall : key_count(); }
};

inline bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) == y; });
}

/// Redis compares option names as C strings: up to a NUL byte.
inline std::string_view c_str(std::string_view s) { return s.substr(0, std::min(s.find('\0'), s.size())); }

/// Parses a request's arguments (argv[0] the command, any case) into a Plan;
/// `now` is its acceptance time (now_ms(): deadlines of EX/PX count from it).
inline Plan plan(std::vector<std::string>&& argv, std::int64_t now) {
  using Op = Plan::Op;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  Plan p;
  p.argv = std::move(argv);
  const std::string_view cmd = p.argv[0];
  const std::size_t n = p.argv.size();
  auto err = [&](std::string msg) {
    p = Plan{};
    p.text.clear();
    error(p.text, msg);
    return std::move(p);
  };
  std::string lower(cmd);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto arity = [&] { return err("ERR wrong number of arguments for '" + lower + "' command"); };
  auto one = [&](Op op, bool writes) {
    p.op = op;
    p.writes = writes;
    p.key_step = 1;
    p.one_key = true;
  };
  auto many = [&](Op op, bool writes, std::uint8_t step) {
    p.op = op;
    p.writes = writes;
    p.key_step = step;
  };
  auto all = [&](Op op, bool writes) {
    p.op = op;
    p.writes = writes;
    p.all_keys = true;
  };
  // A literal, not a std::string: plan() runs for every request, and a
  // string of this length would be a heap allocation each time.
  constexpr const char* not_int = "ERR value is not an integer or out of range";
  // SET's expiry argument (Redis's getExpireMillisecondsOrReply): a positive
  // integer, absolute (EXAT/PXAT) or from now (EX/PX), within int64 ms.
  auto set_deadline = [&](std::string_view arg, bool seconds, bool absolute, std::string& error_text) {
    std::int64_t t = 0;
    if (!string2ll(arg, t)) {
      error_text = not_int;
      return false;
    }
    if (t <= 0 || (seconds && t > kMax / 1000)) {
      error_text = "ERR invalid expire time in '" + lower + "' command";
      return false;
    }
    if (seconds) t *= 1000;
    if (!absolute) {
      if (t > kMax - now) {
        error_text = "ERR invalid expire time in '" + lower + "' command";
        return false;
      }
      t += now;
    }
    p.deadline_ms = t;
    return true;
  };
  if (lower == "get" || lower == "strlen" || lower == "pttl" || lower == "ttl" || lower == "getdel" ||
      lower == "type" || lower == "persist") {
    if (n != 2) return arity();
    one(lower == "get"      ? Op::get
        : lower == "strlen" ? Op::strlen
        : lower == "pttl"   ? Op::pttl
        : lower == "ttl"    ? Op::ttl
        : lower == "getdel" ? Op::getdel
        : lower == "type"   ? Op::type
                            : Op::persist,
        lower == "getdel" || lower == "persist");
  } else if (lower == "set") {
    if (n < 3) return arity();
    one(Op::set, true);
    enum : unsigned { ex = 1, px = 2, exat = 4, pxat = 8 };
    unsigned unit = 0;
    std::string_view expire_arg;
    for (std::size_t i = 3; i < n; ++i) {
      const std::string_view o = c_str(p.argv[i]);
      const bool next = i + 1 < n;
      if (iequals(o, "nx") && p.cond != 2) {
        p.cond = 1;
      } else if (iequals(o, "xx") && p.cond != 1) {
        p.cond = 2;
      } else if (iequals(o, "get")) {
        p.get = true;
      } else if (iequals(o, "keepttl") && unit == 0) {
        p.keepttl = true;
      } else if (iequals(o, "ex") && !p.keepttl && (unit & (exat | px | pxat)) == 0 && next) {
        unit = ex;
        expire_arg = p.argv[++i];
      } else if (iequals(o, "px") && !p.keepttl && (unit & (ex | exat | pxat)) == 0 && next) {
        unit = px;
        expire_arg = p.argv[++i];
      } else if (iequals(o, "exat") && !p.keepttl && (unit & (ex | px | pxat)) == 0 && next) {
        unit = exat;
        expire_arg = p.argv[++i];
      } else if (iequals(o, "pxat") && !p.keepttl && (unit & (ex | px | exat)) == 0 && next) {
        unit = pxat;
        expire_arg = p.argv[++i];
      } else {
        return err("ERR syntax error");
      }
    }
    std::string e;
    if (unit != 0 && !set_deadline(expire_arg, unit == ex || unit == exat, unit == exat || unit == pxat, e)) {
      return err(e);
    }
  } else if (lower == "setex" || lower == "psetex") {
    if (n != 4) return arity();
    one(Op::set, true);
    std::swap(p.argv[2], p.argv[3]);  // SETEX key seconds value: the value where SET has it
    std::string e;
    if (!set_deadline(p.argv[3], lower == "setex", false, e)) return err(e);
  } else if (lower == "setnx") {
    if (n != 3) return arity();
    one(Op::set, true);
    p.cond = 1;
    p.int_reply = true;
  } else if (lower == "getset") {
    if (n != 3) return arity();
    one(Op::set, true);
    p.get = true;
  } else if (lower == "spinset") {
    if (n != 4) return arity();
    one(Op::spinset, true);
    if (!parse_int(p.argv[3], p.num) || p.num < 0 || p.num > 1'000'000) return err(not_int);
  } else if (lower == "incr" || lower == "decr") {
    if (n != 2) return arity();
    one(Op::incrby, true);
    p.num = lower == "incr" ? 1 : -1;
  } else if (lower == "incrby" || lower == "decrby") {
    if (n != 3) return arity();
    one(Op::incrby, true);
    if (!string2ll(p.argv[2], p.num)) return err(not_int);
    if (lower == "decrby") {
      if (p.num == std::numeric_limits<std::int64_t>::min()) return err("ERR decrement would overflow");
      p.num = -p.num;
    }
  } else if (lower == "incrbyfloat") {
    if (n != 3) return arity();
    one(Op::incrbyfloat, true);
    long double incr = 0;  // checked here, parsed again by execute(): a Plan holds no long double
    if (!string2ld(p.argv[2], incr)) return err("ERR value is not a valid float");
  } else if (lower == "append") {
    if (n != 3) return arity();
    one(Op::append, true);
  } else if (lower == "getrange" || lower == "substr") {
    if (n != 4) return arity();
    one(Op::getrange, false);
    if (!string2ll(p.argv[2], p.num) || !string2ll(p.argv[3], p.num2)) return err(not_int);
  } else if (lower == "setrange") {
    if (n != 4) return arity();
    one(Op::setrange, true);
    if (!string2ll(p.argv[2], p.num)) return err(not_int);
    if (p.num < 0) return err("ERR offset is out of range");
  } else if (lower == "expire" || lower == "pexpire" || lower == "expireat" || lower == "pexpireat") {
    if (n < 3) return arity();
    one(Op::expire, true);
    bool nx = false, xx = false, gt = false, lt = false;
    for (std::size_t i = 3; i < n; ++i) {
      const std::string_view o = c_str(p.argv[i]);
      if (iequals(o, "nx")) nx = true;
      else if (iequals(o, "xx")) xx = true;
      else if (iequals(o, "gt")) gt = true;
      else if (iequals(o, "lt")) lt = true;
      else return err("ERR Unsupported option " + std::string(o));
    }
    if ((nx && xx) || (nx && gt) || (nx && lt)) return err("ERR NX and XX, GT or LT options at the same time are not compatible");
    if (gt && lt) return err("ERR GT and LT options at the same time are not compatible");
    p.cond = static_cast<std::uint8_t>((nx ? 1 : 0) | (xx ? 2 : 0) | (gt ? 4 : 0) | (lt ? 8 : 0));
    std::int64_t when = 0;
    if (!string2ll(p.argv[2], when)) return err(not_int);
    const bool seconds = lower == "expire" || lower == "expireat";
    const std::string bad = "ERR invalid expire time in '" + lower + "' command";
    if (seconds) {
      if (when > kMax / 1000 || when < std::numeric_limits<std::int64_t>::min() / 1000) return err(bad);
      when *= 1000;
    }
    const std::int64_t base = lower == "expire" || lower == "pexpire" ? now : 0;
    if (when > kMax - base) return err(bad);
    p.deadline_ms = when + base;
    p.argv.resize(2);
  } else if (lower == "del" || lower == "exists" || lower == "mget" || lower == "touch") {
    if (n < 2) return arity();
    many(lower == "del" ? Op::del : lower == "mget" ? Op::mget : Op::exists, lower == "del", 1);
  } else if (lower == "mset" || lower == "msetnx") {
    if (n < 3 || n % 2 == 0) return arity();
    many(lower == "mset" ? Op::mset : Op::msetnx, true, 2);
  } else if (lower == "rename") {
    if (n != 3) return arity();
    many(Op::rename, true, 1);
  } else if (lower == "dbsize") {
    if (n != 1) return arity();
    all(Op::dbsize, false);
  } else if (lower == "info") {
    // Reads every slot for its keyspace section, as DBSIZE does.
    all(Op::info, false);
    p.num = info_sections(p.argv);
  } else if (lower == "keys") {
    if (n != 2) return arity();
    all(Op::keys, false);
    p.text = p.argv[1];
  } else if (lower == "scan") {
    // One call returns every key (cursor 0 back): COUNT is a hint in Redis too.
    if (n < 2) return arity();
    // Redis reads the cursor with strtoul: digits up to a NUL, no leading space.
    const std::string cursor(c_str(p.argv[1]));
    char* end = nullptr;
    errno = 0;
    (void)std::strtoul(cursor.c_str(), &end, 10);
    if (std::isspace(static_cast<unsigned char>(cursor[0])) || *end != '\0' || errno == ERANGE) {
      return err("ERR invalid cursor");
    }
    if (n % 2 != 0) return err("ERR syntax error");
    all(Op::scan, false);
    p.text = "*";
    for (std::size_t i = 2; i < n; i += 2) {
      if (iequals(c_str(p.argv[i]), "count")) {
        std::int64_t count = 0;
        if (!string2ll(p.argv[i + 1], count)) return err(not_int);
        if (count < 1) return err("ERR syntax error");
      } else if (iequals(c_str(p.argv[i]), "match")) {
        p.text = p.argv[i + 1];
      } else if (iequals(c_str(p.argv[i]), "type")) {
        if (!iequals(p.argv[i + 1], "string")) p.num = 1;  // every key is a string: none of another type
      } else {
        return err("ERR syntax error");
      }
    }
  } else if (lower == "randomkey") {
    if (n != 1) return arity();
    all(Op::randomkey, false);
  } else if (lower == "object") {
    if (n < 2) return arity();
    if (!iequals(p.argv[1], "encoding")) {
      return err("ERR unknown subcommand '" + p.argv[1].substr(0, 128) + "'. Try OBJECT HELP.");
    }
    if (n != 3) return err("ERR wrong number of arguments for 'object|encoding' command");
    p.argv.erase(p.argv.begin() + 1);  // the key where one-key commands have it
    one(Op::object_encoding, false);
  } else if (lower == "flushall" || lower == "flushdb") {
    if (n > 2 || (n == 2 && !iequals(p.argv[1], "sync") && !iequals(p.argv[1], "async"))) return err("ERR syntax error");
    all(Op::flushall, true);
  } else if (lower == "ping") {
    if (n > 2) return arity();
    if (n == 1) simple(p.text, "PONG");
    else bulk(p.text, p.argv[1]);
  } else if (lower == "echo") {
    if (n != 2) return arity();
    bulk(p.text, p.argv[1]);
  } else if (lower == "quit") {
    simple(p.text, "OK");
    p.quit = true;
  } else if (lower == "shutdown") {
    p.shutdown = true;  // no reply: the server closes the connection, as Redis does
    p.quit = true;
  } else if (lower == "command") {
    // Enough for redis-cli: no command table (it then offers no hints).
    if (n >= 2 && iequals(p.argv[1], "count")) integer(p.text, 0);
    else array(p.text, 0);
  } else if (lower == "config") {
    // redis-benchmark asks CONFIG GET save / appendonly: nothing persists here.
    if (n != 3 || !iequals(p.argv[1], "get")) return err("ERR CONFIG supports only GET <parameter> here");
    if (iequals(p.argv[2], "save") || iequals(p.argv[2], "appendonly")) {
      array(p.text, 2);
      bulk(p.text, iequals(p.argv[2], "save") ? "save" : "appendonly");
      bulk(p.text, iequals(p.argv[2], "save") ? "" : "no");
    } else {
      array(p.text, 0);
    }
  } else if (lower == "select") {
    if (n != 2) return arity();
    if (p.argv[1] != "0") return err("ERR DB index is out of range");
    simple(p.text, "OK");
  } else {
    // Redis formats it with printf: the command up to 128 bytes, the
    // arguments quoted while they total under 128 bytes, each up to a NUL.
    std::string args;
    for (std::size_t i = 1; i < n && args.size() < 128; ++i) {
      args += "'" + std::string(c_str(p.argv[i]).substr(0, 128 - args.size())) + "' ";
    }
    std::string msg = "ERR unknown command '" + std::string(c_str(cmd).substr(0, 128)) + "', with args beginning with: " + args;
    for (char& c : msg)
      if (c == '\r' || c == '\n') c = ' ';
    return err(std::move(msg));
  }
  if (p.op == Op::reply) p.argv.clear();
  return p;
}

}  // namespace kv::resp
