// examples/kv_resp_commands.hpp - the commands of kv_server's RESP mode:
// plan() parses a request's arguments into a Plan on the io thread;
// execute() runs it against the keyspace (kv_resp_keyspace.hpp) inside an op
// that reads or mutates the variables of the slots it is given. execute()
// never throws: a failing command appends its "-ERR" reply and leaves the
// value as it was, so no error is ever stored on a key's variable.
#pragma once

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "kv_resp.hpp"
#include "kv_resp_keyspace.hpp"

namespace kv::resp {

/// One request, checked and ready to run.
struct Plan {
  enum class Op : std::uint8_t {
    reply,  ///< `text` is the whole reply (errors found at planning, PING, COMMAND, stubs)
    echo, get, set, del, exists, incrby, mget, mset, append, strlen, pttl, ttl, dbsize, flushall,
    spinset,       ///< SPINSET key value us: busy-work for `num` us, then SET (the per-request work bench)
    expire_sweep,  ///< internal: erase the keys whose deadline passed (never parsed from a request)
  };
  Op op = Op::reply;
  std::vector<std::string> argv;
  std::string text;
  std::int64_t num = 0;          ///< INCRBY delta, SPINSET us
  std::int64_t deadline_ms = 0;  ///< SET EX/PX: absolute deadline
  std::uint8_t cond = 0;         ///< SET NX = 1, XX = 2
  bool writes = false;
  bool all_keys = false;  ///< DBSIZE, FLUSHALL: every slot
  bool quit = false;      ///< QUIT: reply, then close the connection
  bool shutdown = false;  ///< SHUTDOWN: stop the server
  std::uint8_t key_step = 0;  ///< keys are argv[1], argv[1 + step], ... (0: none; one-key commands: argv[1] only)
  bool one_key = false;

  /// Number of keys, and the i-th.
  [[nodiscard]] std::size_t key_count() const {
    if (key_step == 0) return 0;
    if (one_key) return 1;
    return (argv.size() - 1 + key_step - 1) / key_step;
  }
  [[nodiscard]] const std::string& key(std::size_t i) const { return argv[1 + i * key_step]; }
  /// Slots the op is given: one per key, or (all-key commands) `num`, every
  /// slot the keyspace had when the request was accepted.
  [[nodiscard]] std::size_t slot_count() const { return all_keys ? static_cast<std::size_t>(num) : key_count(); }
};

inline bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) == y; });
}

/// Parses a request's arguments (argv[0] the command, any case) into a Plan;
/// `now` is its acceptance time (deadlines of EX/PX count from it).
inline Plan plan(std::vector<std::string>&& argv, std::int64_t now) {
  using Op = Plan::Op;
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
  const std::string_view not_int = "ERR value is not an integer or out of range";
  if (lower == "get" || lower == "strlen" || lower == "pttl" || lower == "ttl") {
    if (n != 2) return arity();
    one(lower == "get" ? Op::get : lower == "strlen" ? Op::strlen : lower == "pttl" ? Op::pttl : Op::ttl, false);
  } else if (lower == "set") {
    if (n < 3) return arity();
    one(Op::set, true);
    for (std::size_t i = 3; i < n; ++i) {
      const std::string_view o = p.argv[i];
      if (iequals(o, "nx") && p.cond != 2) {
        p.cond = 1;
      } else if (iequals(o, "xx") && p.cond != 1) {
        p.cond = 2;
      } else if ((iequals(o, "ex") || iequals(o, "px")) && p.deadline_ms == 0 && i + 1 < n) {
        std::int64_t t = 0;
        if (!parse_int(p.argv[++i], t)) return err(std::string(not_int));
        const std::int64_t unit = iequals(o, "ex") ? 1000 : 1;
        if (t <= 0 || t > (std::numeric_limits<std::int64_t>::max() / 2 - now) / unit) {
          return err("ERR invalid expire time in 'set' command");
        }
        p.deadline_ms = now + t * unit;
      } else {
        return err("ERR syntax error");
      }
    }
  } else if (lower == "spinset") {
    if (n != 4) return arity();
    one(Op::spinset, true);
    if (!parse_int(p.argv[3], p.num) || p.num < 0 || p.num > 1'000'000) return err(std::string(not_int));
  } else if (lower == "incr" || lower == "decr") {
    if (n != 2) return arity();
    one(Op::incrby, true);
    p.num = lower == "incr" ? 1 : -1;
  } else if (lower == "incrby" || lower == "decrby") {
    if (n != 3) return arity();
    one(Op::incrby, true);
    if (!parse_int(p.argv[2], p.num)) return err(std::string(not_int));
    if (lower == "decrby") {
      if (p.num == std::numeric_limits<std::int64_t>::min()) return err("ERR decrement would overflow");
      p.num = -p.num;
    }
  } else if (lower == "append") {
    if (n != 3) return arity();
    one(Op::append, true);
  } else if (lower == "del" || lower == "exists" || lower == "mget") {
    if (n < 2) return arity();
    many(lower == "del" ? Op::del : lower == "exists" ? Op::exists : Op::mget, lower == "del", 1);
  } else if (lower == "mset") {
    if (n < 3 || n % 2 == 0) return arity();
    many(Op::mset, true, 2);
  } else if (lower == "dbsize") {
    if (n != 1) return arity();
    p.op = Op::dbsize;
    p.all_keys = true;
  } else if (lower == "flushall" || lower == "flushdb") {
    if (n > 2 || (n == 2 && !iequals(p.argv[1], "sync") && !iequals(p.argv[1], "async"))) return err("ERR syntax error");
    p.op = Op::flushall;
    p.all_keys = true;
    p.writes = true;
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
    std::string msg = "ERR unknown command '" + std::string(cmd.substr(0, 128)) + "', with args beginning with: ";
    for (std::size_t i = 1; i < n && i < 4; ++i) msg += "'" + p.argv[i].substr(0, 64) + "' ";
    for (char& c : msg)
      if (c == '\r' || c == '\n') c = ' ';
    return err(std::move(msg));
  }
  if (p.op == Op::reply) p.argv.clear();
  return p;
}

/// Busy work for `us` microseconds: a stand-in for a request's own CPU work
/// (hashing, parsing, compression).
inline void spin_us(std::int64_t us) {
  if (us <= 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

/// Runs one planned command and appends its reply. `slots` are those of
/// the plan's keys, in order (for all-key commands: every slot). The op
/// running it holds every slot's variable: mutated if p.writes, read
/// otherwise. Never throws (see the file comment).
/// A plan over more keys than one op may hold runs as several ops, each
/// given the slots of keys [k0, k0 + nslots) (combine() joins their replies).
inline void execute(const Plan& p, const Slot* slots, std::size_t nslots, std::int64_t now, std::size_t max_value,
                    std::string& out, std::size_t k0 = 0) noexcept {
  using Op = Plan::Op;
  const std::size_t mark = out.size();
  try {
    switch (p.op) {
      case Op::reply:
        out += p.text;
        break;
      case Op::echo:
        bulk(out, p.argv[1]);
        break;
      case Op::get:
        if (const Cell* c = Keyspace::find(slots[0], p.key(0), now, false)) bulk(out, c->value);
        else null_bulk(out);
        break;
      case Op::strlen: {
        const Cell* c = Keyspace::find(slots[0], p.key(0), now, false);
        integer(out, c ? static_cast<std::int64_t>(c->value.size()) : 0);
        break;
      }
      case Op::pttl:
      case Op::ttl: {
        const Cell* c = Keyspace::find(slots[0], p.key(0), now, false);
        if (c == nullptr) integer(out, -2);
        else if (c->deadline_ms == 0) integer(out, -1);
        else integer(out, p.op == Op::pttl ? c->deadline_ms - now : (c->deadline_ms - now + 500) / 1000);
        break;
      }
      case Op::spinset:
        spin_us(p.num);
        [[fallthrough]];
      case Op::set: {
        if (p.argv[2].size() > max_value) {
          error(out, "ERR string exceeds maximum allowed size");
          break;
        }
        const bool exists = Keyspace::find(slots[0], p.key(0), now, true) != nullptr;
        if ((p.cond == 1 && exists) || (p.cond == 2 && !exists)) {
          null_bulk(out);
          break;
        }
        Cell& c = Keyspace::upsert(slots[0], p.key(0), now);
        c.value = p.argv[2];
        c.deadline_ms = p.deadline_ms;
        simple(out, "OK");
        break;
      }
      case Op::incrby: {
        Cell* c = Keyspace::find(slots[0], p.key(0), now, true);
        std::int64_t v = 0;
        if (c != nullptr && !parse_int(c->value, v)) {
          error(out, "ERR value is not an integer or out of range");
          break;
        }
        if ((p.num > 0 && v > std::numeric_limits<std::int64_t>::max() - p.num) ||
            (p.num < 0 && v < std::numeric_limits<std::int64_t>::min() - p.num)) {
          error(out, "ERR increment or decrement would overflow");
          break;
        }
        v += p.num;
        Cell& cell = c != nullptr ? *c : Keyspace::upsert(slots[0], p.key(0), now);
        cell.value = std::to_string(v);  // a TTL stays, as in Redis
        integer(out, v);
        break;
      }
      case Op::append: {
        Cell* c = Keyspace::find(slots[0], p.key(0), now, true);
        const std::size_t have = c ? c->value.size() : 0;
        if (have + p.argv[2].size() > max_value) {
          error(out, "ERR string exceeds maximum allowed size");
          break;
        }
        Cell& cell = c != nullptr ? *c : Keyspace::upsert(slots[0], p.key(0), now);
        cell.value += p.argv[2];
        integer(out, static_cast<std::int64_t>(cell.value.size()));
        break;
      }
      case Op::del:
      case Op::exists: {
        std::int64_t count = 0;
        for (std::size_t i = 0; i < nslots; ++i) {
          if (Keyspace::find(slots[i], p.key(k0 + i), now, p.op == Op::del) == nullptr) continue;
          ++count;
          if (p.op == Op::del) Keyspace::erase(slots[i], p.key(k0 + i));
        }
        integer(out, count);
        break;
      }
      case Op::mget:
        if (k0 == 0) array(out, p.slot_count());
        for (std::size_t i = 0; i < nslots; ++i) {
          if (const Cell* c = Keyspace::find(slots[i], p.key(k0 + i), now, false)) bulk(out, c->value);
          else null_bulk(out);
        }
        break;
      case Op::mset:
        for (std::size_t i = 0; i < nslots; ++i) {
          if (p.argv[2 + 2 * (k0 + i)].size() > max_value) {
            error(out, "ERR string exceeds maximum allowed size");
            return;  // before any key changed
          }
        }
        for (std::size_t i = 0; i < nslots; ++i) {
          Cell& c = Keyspace::upsert(slots[i], p.key(k0 + i), now);
          c.value = p.argv[2 + 2 * (k0 + i)];
          c.deadline_ms = 0;
        }
        simple(out, "OK");
        break;
      case Op::dbsize: {
        std::int64_t count = 0;
        for (std::size_t i = 0; i < nslots; ++i) {
          const Slot& s = slots[i];
          if (s.shard != nullptr) {
            for (const auto& [k, c] : s.shard->cells) count += c.deadline_ms == 0 || c.deadline_ms > now;
          } else {
            const Cell& c = s.entry->cell;
            count += c.present && (c.deadline_ms == 0 || c.deadline_ms > now);
          }
        }
        integer(out, count);
        break;
      }
      case Op::flushall:
        for (std::size_t i = 0; i < nslots; ++i) {
          if (slots[i].shard != nullptr) slots[i].shard->cells.clear();
          else slots[i].entry->cell = Cell{};
        }
        simple(out, "OK");
        break;
      case Op::expire_sweep:
        for (std::size_t i = 0; i < nslots; ++i) (void)Keyspace::find(slots[i], p.key(k0 + i), now, true);
        break;
    }
  } catch (const std::exception& e) {
    // Out of memory and the like: this command fails, its key stays as it was
    // left, later requests are unaffected.
    out.resize(mark);
    error(out, std::string("ERR ") + e.what());
  }
}

/// The reply of a plan run as several ops, from their replies in key order:
/// MGET's are its elements (the first op wrote the header), counts add up,
/// OK stays OK; a part that failed answers for the whole.
inline std::string combine(const Plan& p, const std::vector<std::string>& parts) {
  using Op = Plan::Op;
  for (const std::string& part : parts) {
    if (!part.empty() && part[0] == '-') return part;
  }
  std::string out;
  switch (p.op) {
    case Op::del:
    case Op::exists:
    case Op::dbsize: {
      std::int64_t sum = 0;
      for (const std::string& part : parts) {
        std::int64_t n = 0;
        (void)parse_int(std::string_view(part).substr(1, part.size() - 3), n);  // ":<n>\r\n"
        sum += n;
      }
      integer(out, sum);
      break;
    }
    case Op::mset:
    case Op::flushall:
      simple(out, "OK");
      break;
    default:
      for (const std::string& part : parts) out += part;
  }
  return out;
}

}  // namespace kv::resp
