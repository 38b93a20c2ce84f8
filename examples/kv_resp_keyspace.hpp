// examples/kv_resp_keyspace.hpp - the keyspace of kv_server's RESP mode: values,
// and which engine variable guards each key (kv_resp_commands.hpp runs the
// commands on it; kv_resp_server.hpp pushes them as engine ops).
//
// Keys are strings, values binary-safe strings with an optional deadline.
// Which engine variable guards a key (the `shards` option):
//   shards == 0: a variable per key, created when a request first names the
//                key and deleted (Engine::delete_variable) once the key is
//                gone and no request holds it;
//   shards == N: N variables, key k guarded by shard hash(k) % N, each shard
//                a hash map from key to value.
// docs/asio.md ("The RESP server") has the measurements behind the default.
//
// Split by thread: Keyspace::resolve / all / release (which variables a
// request touches, per-key bookkeeping) run on the io thread only (one io
// thread serves all connections); find / upsert / erase run inside an op
// holding the slot's variable.
#pragma once

#include <ordo/engine.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kv_resp.hpp"

namespace kv::resp {

/// Milliseconds on the steady clock (deadlines of EX/PX).
inline std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Cell {
  std::string value;
  std::int64_t deadline_ms = 0;  ///< 0: no expiry; else now_ms() at which the key expires
  bool present = false;          ///< per-key mode: the entry outlives its key until released
};

/// Heterogeneous lookup (find by string_view, no temporary string).
struct KeyHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using CellMap = std::unordered_map<std::string, Cell, KeyHash, std::equal_to<>>;

struct Shard {
  ordo::Var var;
  CellMap cells;  ///< guarded by var
};

struct Entry {  ///< per-key mode
  ordo::Var var;
  Cell cell;              ///< guarded by var
  std::uint32_t held = 0;  ///< requests pushed and not yet released (io thread)
};

/// What an op is given for one key: its variable and where its value lives.
struct Slot {
  ordo::Var var;
  Shard* shard = nullptr;  ///< shard mode
  Entry* entry = nullptr;  ///< per-key mode
};

class Keyspace {
 public:
  explicit Keyspace(unsigned shards) : shards_(shards) {}

  /// Creates the shard variables (call once, before any request).
  void init(ordo::Engine& engine) {
    engine_ = &engine;
    for (auto& s : shards_) s.var = engine.new_variable();
  }
  [[nodiscard]] bool per_key() const noexcept { return shards_.empty(); }

  // ---- io thread ----
  /// The slot of `key` for a request about to be pushed (per-key mode: the
  /// entry is created if needed and held until release()).
  Slot resolve(std::string_view key) {
    if (!per_key()) {
      Shard& s = shards_[KeyHash{}(key) % shards_.size()];
      return Slot{s.var, &s, nullptr};
    }
    auto it = entries_.find(key);
    if (it == entries_.end()) it = entries_.emplace(std::string(key), Entry{engine_->new_variable(), {}, 0}).first;
    Entry& e = it->second;
    ++e.held;
    return Slot{e.var, nullptr, &e};
  }
  /// The slot of an existing key (per-key mode), or nothing (expiry sweep).
  bool resolve_existing(std::string_view key, Slot& out) {
    if (per_key() && entries_.find(key) == entries_.end()) return false;
    out = resolve(key);
    return true;
  }
  /// Every slot (DBSIZE, FLUSHALL): every shard, or every key's entry.
  void all(std::vector<Slot>& out) {
    if (!per_key()) {
      for (auto& s : shards_) out.push_back(Slot{s.var, &s, nullptr});
      return;
    }
    for (auto& [k, e] : entries_) {
      ++e.held;
      out.push_back(Slot{e.var, nullptr, &e});
    }
  }
  /// After the request's op has finished: a per-key entry no request holds
  /// and whose key is gone is deleted with its variable.
  void release(const Slot& s, std::string_view key) {
    if (s.entry == nullptr || --s.entry->held != 0 || s.entry->cell.present) return;
    auto it = entries_.find(key);
    engine_->delete_variable(it->second.var);
    entries_.erase(it);
  }
  /// As release, for slots from all() (per-key: the key is looked up by entry).
  void release_all(const std::vector<Slot>& slots) {
    if (!per_key()) return;
    for (const Slot& s : slots) --s.entry->held;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.held == 0 && !it->second.cell.present) {
        engine_->delete_variable(it->second.var);
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
  /// Keys with a variable right now (per-key mode; shards: their count).
  [[nodiscard]] std::size_t variables() const { return per_key() ? entries_.size() : shards_.size(); }

  // ---- inside an op holding the slot's variable ----
  /// The live value of key, or null. An expired value is erased when the
  /// caller mutates the slot (`writing`), and only ignored otherwise.
  static Cell* find(const Slot& s, std::string_view key, std::int64_t now, bool writing) {
    Cell* c = nullptr;
    if (s.shard != nullptr) {
      auto it = s.shard->cells.find(key);
      if (it == s.shard->cells.end()) return nullptr;
      c = &it->second;
    } else {
      c = &s.entry->cell;
      if (!c->present) return nullptr;
    }
    if (c->deadline_ms != 0 && c->deadline_ms <= now) {
      if (writing) erase(s, key);
      return nullptr;
    }
    return c;
  }
  /// The value of key, created empty if absent (mutating ops only).
  static Cell& upsert(const Slot& s, std::string_view key, std::int64_t now) {
    if (Cell* c = find(s, key, now, true)) return *c;
    if (s.shard != nullptr) return s.shard->cells.emplace(std::string(key), Cell{{}, 0, true}).first->second;
    Cell& c = s.entry->cell;
    c = Cell{{}, 0, true};
    return c;
  }
  static void erase(const Slot& s, std::string_view key) {
    if (s.shard != nullptr) {
      auto it = s.shard->cells.find(key);
      if (it != s.shard->cells.end()) s.shard->cells.erase(it);
    } else {
      s.entry->cell = Cell{};
    }
  }

 private:
  std::vector<Shard> shards_{};
  ordo::Engine* engine_ = nullptr;
  std::unordered_map<std::string, Entry, KeyHash, std::equal_to<>> entries_;  ///< per-key mode; io thread
};

}  // namespace kv::resp
