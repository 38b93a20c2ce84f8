// examples/kv_resp_execute.hpp - execute(): runs a command planned by
// kv_resp_commands.hpp against the keyspace, inside an op holding the
// variables of its slots. execute() never throws: a failing command appends
// its "-ERR" reply and leaves the value as it was, so no error is ever
// stored on a key's variable.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <cstdint>
#include <string>
#include <vector>

#include "kv_resp_commands.hpp"

namespace kv::resp {

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
/// Calls fn(key, cell) for every live key of the slots (all-key commands).
template <class Fn>
void for_each_live(const Slot* slots, std::size_t n, std::int64_t now, Fn&& fn) {
  const auto live = [now](const Cell& c) { return c.deadline_ms == 0 || c.deadline_ms >= now; };
  for (std::size_t i = 0; i < n; ++i) {
    const Slot& s = slots[i];
    if (s.shard != nullptr) {
      for (const auto& [k, c] : s.shard->cells)
        if (live(c)) fn(std::string_view(k), c);
    } else if (s.entry->cell.present && live(s.entry->cell)) {
      fn(s.entry->key(), s.entry->cell);
    }
  }
}

/// A plan over more keys than one op may hold runs as several ops, each
/// given the slots of keys [k0, k0 + nslots) (combine() joins their replies).
inline void execute(const Plan& p, const Slot* slots, std::size_t nslots, std::int64_t now, std::size_t max_value,
                    std::string& out, std::size_t k0 = 0) noexcept {
  using Op = Plan::Op;
  const std::size_t mark = out.size();
  const char* too_big = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
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
      case Op::getdel:
        if (const Cell* c = Keyspace::find(slots[0], p.key(0), now, true)) {
          bulk(out, c->value);
          Keyspace::erase(slots[0], p.key(0));
        } else {
          null_bulk(out);
        }
        break;
      case Op::strlen: {
        const Cell* c = Keyspace::find(slots[0], p.key(0), now, false);
        integer(out, c ? static_cast<std::int64_t>(c->value.size()) : 0);
        break;
      }
      case Op::type:
        simple(out, Keyspace::find(slots[0], p.key(0), now, false) != nullptr ? "string" : "none");
        break;
      case Op::object_encoding:
        if (const Cell* c = Keyspace::find(slots[0], p.key(0), now, false)) {
          bulk(out, c->enc == Encoding::int_ ? "int" : c->enc == Encoding::embstr ? "embstr" : "raw");
        } else {
          null_bulk(out);
        }
        break;
      case Op::pttl:
      case Op::ttl: {
        const Cell* c = Keyspace::find(slots[0], p.key(0), now, false);
        if (c == nullptr) {
          integer(out, -2);
        } else if (c->deadline_ms == 0) {
          integer(out, -1);
        } else {
          const std::int64_t ttl = std::max<std::int64_t>(c->deadline_ms - now, 0);
          integer(out, p.op == Op::pttl ? ttl : (ttl + 500) / 1000);
        }
        break;
      }
      case Op::spinset:
        spin_us(p.num);
        [[fallthrough]];
      case Op::set: {
        if (p.argv[2].size() > max_value) {
          error(out, too_big);
          break;
        }
        Cell* old = Keyspace::find(slots[0], p.key(0), now, true);
        if (p.get) {
          if (old != nullptr) bulk(out, old->value);
          else null_bulk(out);
        }
        if ((p.cond == 1 && old != nullptr) || (p.cond == 2 && old == nullptr)) {
          if (p.int_reply) integer(out, 0);
          else if (!p.get) null_bulk(out);
          break;
        }
        const std::int64_t kept = p.keepttl && old != nullptr ? old->deadline_ms : 0;
        Cell& c = old != nullptr ? *old : Keyspace::upsert(slots[0], p.key(0), now);
        c.value = p.argv[2];
        c.deadline_ms = p.keepttl ? kept : p.deadline_ms;
        c.enc = encoding_of(c.value);
        if (p.int_reply) integer(out, 1);
        else if (!p.get) simple(out, "OK");
        break;
      }
      case Op::incrby: {
        Cell* c = Keyspace::find(slots[0], p.key(0), now, true);
        std::int64_t v = 0;
        if (c != nullptr && !string2ll(c->value, v)) {
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
        cell.enc = Encoding::int_;
        integer(out, v);
        break;
      }
      case Op::incrbyfloat: {
        Cell* c = Keyspace::find(slots[0], p.key(0), now, true);
        long double v = 0;
        if (c != nullptr && !string2ld(c->value, v)) {
          error(out, "ERR value is not a valid float");
          break;
        }
        long double incr = 0;
        (void)string2ld(p.argv[2], incr);  // plan() checked it
        v += incr;
        if (std::isnan(v) || std::isinf(v)) {
          error(out, "ERR increment would produce NaN or Infinity");
          break;
        }
        std::string s = ld2string(v);
        Cell& cell = c != nullptr ? *c : Keyspace::upsert(slots[0], p.key(0), now);
        cell.enc = s.size() <= 44 ? Encoding::embstr : Encoding::raw;
        cell.value = std::move(s);
        bulk(out, cell.value);
        break;
      }
      case Op::append: {
        Cell* c = Keyspace::find(slots[0], p.key(0), now, true);
        const std::size_t have = c ? c->value.size() : 0;
        if (have + p.argv[2].size() > max_value) {
          error(out, too_big);
          break;
        }
        if (c == nullptr) {
          Cell& cell = Keyspace::upsert(slots[0], p.key(0), now);
          cell.value = p.argv[2];
          cell.enc = encoding_of(cell.value);
          integer(out, static_cast<std::int64_t>(cell.value.size()));
        } else {
          c->value += p.argv[2];
          c->enc = Encoding::raw;
          integer(out, static_cast<std::int64_t>(c->value.size()));
        }
        break;
      }
      case Op::getrange: {
        const Cell* c = Keyspace::find(slots[0], p.key(0), now, false);
        const auto len = static_cast<std::int64_t>(c != nullptr ? c->value.size() : 0);
        std::int64_t start = p.num, end = p.num2;
        if (c == nullptr || (start < 0 && end < 0 && start > end)) {
          bulk(out, "");
          break;
        }
        if (start < 0) start = len + start;
        if (end < 0) end = len + end;
        if (start < 0) start = 0;
        if (end < 0) end = 0;
        if (end >= len) end = len - 1;
        if (start > end || len == 0) bulk(out, "");
        else bulk(out, std::string_view(c->value).substr(static_cast<std::size_t>(start), static_cast<std::size_t>(end - start + 1)));
        break;
      }
      case Op::setrange: {
        Cell* c = Keyspace::find(slots[0], p.key(0), now, true);
        const std::string& v = p.argv[3];
        if (c == nullptr && v.empty()) {
          integer(out, 0);
          break;
        }
        if (!v.empty() && static_cast<std::uint64_t>(p.num) + v.size() > max_value) {
          error(out, too_big);
          break;
        }
        Cell& cell = c != nullptr ? *c : Keyspace::upsert(slots[0], p.key(0), now);
        if (!v.empty()) {
          const auto off = static_cast<std::size_t>(p.num);
          if (cell.value.size() < off + v.size()) cell.value.resize(off + v.size(), '\0');
          cell.value.replace(off, v.size(), v);
          cell.enc = Encoding::raw;
        }
        integer(out, static_cast<std::int64_t>(cell.value.size()));
        break;
      }
      case Op::expire: {
        Cell* c = Keyspace::find(slots[0], p.key(0), now, true);
        if (c == nullptr) {
          integer(out, 0);
          break;
        }
        const std::int64_t current = c->deadline_ms == 0 ? -1 : c->deadline_ms;
        const std::int64_t when = p.deadline_ms;
        if (((p.cond & 1) && current != -1) || ((p.cond & 2) && current == -1) ||
            ((p.cond & 4) && (when <= current || current == -1)) || ((p.cond & 8) && current != -1 && when >= current)) {
          integer(out, 0);
          break;
        }
        if (when <= now) Keyspace::erase(slots[0], p.key(0));  // already past: the key goes now
        else c->deadline_ms = when;
        integer(out, 1);
        break;
      }
      case Op::persist: {
        Cell* c = Keyspace::find(slots[0], p.key(0), now, true);
        const bool had = c != nullptr && c->deadline_ms != 0;
        if (had) c->deadline_ms = 0;
        integer(out, had ? 1 : 0);
        break;
      }
      case Op::rename: {
        Cell* c = Keyspace::find(slots[0], p.key(0), now, true);
        if (c == nullptr) {
          error(out, "ERR no such key");
          break;
        }
        if (p.key(0) != p.key(1)) {
          Cell moved = std::move(*c);
          Keyspace::erase(slots[0], p.key(0));
          Cell& dst = Keyspace::upsert(slots[1], p.key(1), now);
          dst.value = std::move(moved.value);
          dst.deadline_ms = moved.deadline_ms;
          dst.enc = moved.enc;
        }
        simple(out, "OK");
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
      case Op::msetnx:
        // One op holds all its keys: Server::run() never splits MSETNX.
        for (std::size_t i = 0; i < nslots; ++i) {
          if (Keyspace::find(slots[i], p.key(k0 + i), now, true) != nullptr) {
            integer(out, 0);
            return;
          }
        }
        [[fallthrough]];
      case Op::mset:
        for (std::size_t i = 0; i < nslots; ++i) {
          if (p.argv[2 + 2 * (k0 + i)].size() > max_value) {
            error(out, too_big);
            return;  // before any key changed
          }
        }
        for (std::size_t i = 0; i < nslots; ++i) {
          Cell& c = Keyspace::upsert(slots[i], p.key(k0 + i), now);
          c.value = p.argv[2 + 2 * (k0 + i)];
          c.deadline_ms = 0;
          c.enc = encoding_of(c.value);
        }
        if (p.op == Op::msetnx) integer(out, 1);
        else simple(out, "OK");
        break;
      case Op::dbsize: {
        std::int64_t count = 0;
        for_each_live(slots, nslots, now, [&](std::string_view, const Cell&) { ++count; });
        integer(out, count);
        break;
      }
      case Op::info: {
        std::int64_t keys = 0, expires = 0;
        for_each_live(slots, nslots, now, [&](std::string_view, const Cell& c) {
          ++keys;
          expires += c.deadline_ms != 0 ? 1 : 0;
        });
        if (nslots == p.slot_count()) {
          info_reply(out, static_cast<std::uint32_t>(p.num), p.text, keys, expires);
        } else {  // a part of a split INFO: its counts, which combine() sums
          array(out, 2);
          integer(out, keys);
          integer(out, expires);
        }
        break;
      }
      case Op::keys:
      case Op::scan: {
        std::string body;
        std::size_t count = 0;
        if (p.num == 0) {
          for_each_live(slots, nslots, now, [&](std::string_view k, const Cell&) {
            if (p.text != "*" && !stringmatch(p.text, k)) return;  // Redis's shortcut: "*" takes "" too
            bulk(body, k);
            ++count;
          });
        }
        if (p.op == Op::scan) out += "*2\r\n$1\r\n0\r\n";  // cursor 0: nothing left
        array(out, count);
        out += body;
        break;
      }
      case Op::randomkey: {
        bool found = false;
        for_each_live(slots, nslots, now, [&](std::string_view k, const Cell&) {
          if (!found) bulk(out, k);
          found = true;
        });
        if (!found) null_bulk(out);
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
    case Op::info: {
      // Each part is *2 :<keys> :<expires> (execute()).
      std::int64_t keys = 0, expires = 0;
      for (const std::string& part : parts) {
        const std::size_t a = part.find(':'), b = part.find(':', a + 1);
        std::int64_t k = 0, e = 0;
        (void)parse_int(std::string_view(part).substr(a + 1, part.find('\r', a) - a - 1), k);
        (void)parse_int(std::string_view(part).substr(b + 1, part.find('\r', b) - b - 1), e);
        keys += k;
        expires += e;
      }
      info_reply(out, static_cast<std::uint32_t>(p.num), p.text, keys, expires);
      break;
    }
    case Op::mset:
    case Op::flushall:
      simple(out, "OK");
      break;
    case Op::keys:
    case Op::scan: {
      // Each part is [*2 $1 0] *<n> <keys>: one array of all the keys.
      std::size_t count = 0;
      std::string body;
      for (const std::string& part : parts) {
        std::size_t at = p.op == Op::scan ? 11 : 0;  // past "*2\r\n$1\r\n0\r\n"
        const std::size_t eol = part.find("\r\n", at);
        std::int64_t n = 0;
        (void)parse_int(std::string_view(part).substr(at + 1, eol - at - 1), n);
        count += static_cast<std::size_t>(n);
        body.append(part, eol + 2);
      }
      if (p.op == Op::scan) out += "*2\r\n$1\r\n0\r\n";
      array(out, count);
      out += body;
      break;
    }
    case Op::randomkey:
      for (const std::string& part : parts) {
        if (part != "$-1\r\n") return part;
      }
      null_bulk(out);
      break;
    default:
      for (const std::string& part : parts) out += part;
  }
  return out;
}

}  // namespace kv::resp
