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
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kv_resp.hpp"
#include "kv_resp_redis.hpp"

namespace kv::resp {

/// How Redis would hold a value (OBJECT ENCODING): it depends on the
/// command that wrote it, so it is kept beside the value.
enum class Encoding : std::uint8_t { int_, embstr, raw };
inline Encoding encoding_of(std::string_view v) {
  std::int64_t n = 0;
  if (v.size() <= 20 && string2ll(v, n)) return Encoding::int_;
  return v.size() <= 44 ? Encoding::embstr : Encoding::raw;
}

struct Cell {
  std::string value;
  std::int64_t deadline_ms = 0;  ///< 0: no expiry; else now_ms() after which the key is gone
  bool present = false;          ///< per-key mode: the entry outlives its key until released
  Encoding enc = Encoding::raw;
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

/// A key's entry (per-key mode). Allocated with its key's bytes right after
/// it, so that a lookup touches one line for the key and its variable.
struct Entry {
  ordo::Var var;
  Cell cell;               ///< guarded by var
  std::uint32_t held = 0;  ///< requests pushed and not yet released (io thread)
  std::uint32_t key_size = 0;
  std::uint64_t hash = 0;  ///< KeyHash of the key

  [[nodiscard]] std::string_view key() const noexcept {
    return {reinterpret_cast<const char*>(this + 1), key_size};
  }
  static Entry* make(std::string_view key, std::uint64_t hash, ordo::Var var) {
    void* mem = ::operator new(sizeof(Entry) + key.size());
    auto* e = new (mem) Entry{var, {}, 0, static_cast<std::uint32_t>(key.size()), hash};
    std::memcpy(reinterpret_cast<char*>(e + 1), key.data(), key.size());
    return e;
  }
  static void destroy(Entry* e) noexcept {
    e->~Entry();
    ::operator delete(e);
  }
};

/// Key -> Entry for per-key mode: open addressing with linear probing over
/// (hash, entry) pairs, at most half full. A hit costs the bucket's line and
/// the entry's; std::unordered_map's chains cost two more (its node, then the
/// key's heap bytes), which dominated the io thread with many keys
/// (docs/asio.md, "Keys to variables").
class KeyIndex {
 public:
  KeyIndex() : buckets_(1024) {}
  KeyIndex(const KeyIndex&) = delete;
  KeyIndex& operator=(const KeyIndex&) = delete;
  ~KeyIndex() {
    for (Bucket& b : buckets_) {
      if (b.entry != nullptr) Entry::destroy(b.entry);
    }
  }

  [[nodiscard]] Entry* find(std::string_view key, std::uint64_t h) const noexcept {
    const std::size_t mask = buckets_.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const Bucket& b = buckets_[i];
      if (b.entry == nullptr) return nullptr;
      if (b.hash == h && b.entry->key() == key) return b.entry;
    }
  }
  /// Adds e (its key absent).
  void insert(Entry* e) {
    if (2 * (size_ + 1) > buckets_.size()) grow();
    place(e);
    ++size_;
  }
  /// Removes e, shifting later entries of its run back (no tombstones).
  void erase(const Entry* e) noexcept {
    const std::size_t mask = buckets_.size() - 1;
    std::size_t i = e->hash & mask;
    while (buckets_[i].entry != e) i = (i + 1) & mask;
    for (std::size_t j = (i + 1) & mask; buckets_[j].entry != nullptr; j = (j + 1) & mask) {
      // Entry j may fill hole i if its home is not in (i, j] (cyclically).
      const std::size_t home = buckets_[j].hash & mask;
      if (((j - home) & mask) >= ((j - i) & mask)) {
        buckets_[i] = buckets_[j];
        i = j;
      }
    }
    buckets_[i] = Bucket{};
    --size_;
  }
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (const Bucket& b : buckets_) {
      if (b.entry != nullptr) fn(b.entry);
    }
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  struct Bucket {
    std::uint64_t hash = 0;
    Entry* entry = nullptr;
  };
  void place(Entry* e) noexcept {
    const std::size_t mask = buckets_.size() - 1;
    std::size_t i = e->hash & mask;
    while (buckets_[i].entry != nullptr) i = (i + 1) & mask;
    buckets_[i] = Bucket{e->hash, e};
  }
  void grow() {
    std::vector<Bucket> old(buckets_.size() * 2);
    old.swap(buckets_);
    for (const Bucket& b : old) {
      if (b.entry != nullptr) place(b.entry);
    }
  }
  std::vector<Bucket> buckets_;
  std::size_t size_ = 0;
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
    const std::uint64_t h = KeyHash{}(key);
    Entry* e = entries_.find(key, h);
    if (e == nullptr) {
      e = Entry::make(key, h, engine_->new_variable());
      entries_.insert(e);
    }
    ++e->held;
    return Slot{e->var, nullptr, e};
  }
  /// The slot of an existing key (per-key mode), or nothing (expiry sweep).
  bool resolve_existing(std::string_view key, Slot& out) {
    if (per_key() && entries_.find(key, KeyHash{}(key)) == nullptr) return false;
    out = resolve(key);
    return true;
  }
  /// Every slot (DBSIZE, FLUSHALL): every shard, or every key's entry.
  void all(std::vector<Slot>& out) {
    if (!per_key()) {
      for (auto& s : shards_) out.push_back(Slot{s.var, &s, nullptr});
      return;
    }
    entries_.for_each([&](Entry* e) {
      ++e->held;
      out.push_back(Slot{e->var, nullptr, e});
    });
  }
  /// After the request's op has finished: a per-key entry no request holds
  /// and whose key is gone is deleted with its variable.
  void release(const Slot& s) {
    if (s.entry == nullptr || --s.entry->held != 0 || s.entry->cell.present) return;
    drop(s.entry);
  }
  /// As release, for n slots from all().
  void release_all(const Slot* slots, std::size_t n) {
    if (!per_key()) return;
    for (std::size_t i = 0; i < n; ++i) release(slots[i]);
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
    if (c->deadline_ms != 0 && c->deadline_ms < now) {  // Redis: expired once now > deadline
      if (writing) erase(s, key);
      return nullptr;
    }
    return c;
  }
  /// The value of key, created empty if absent (mutating ops only).
  static Cell& upsert(const Slot& s, std::string_view key, std::int64_t now) {
    if (Cell* c = find(s, key, now, true)) return *c;
    if (s.shard != nullptr) return s.shard->cells.emplace(std::string(key), Cell{{}, 0, true, Encoding::raw}).first->second;
    Cell& c = s.entry->cell;
    c = Cell{{}, 0, true, Encoding::raw};
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
  /// Deletes a per-key entry and its variable (io thread).
  void drop(Entry* e) {
    engine_->delete_variable(e->var);
    entries_.erase(e);
    Entry::destroy(e);
  }
  KeyIndex entries_;  ///< per-key mode; io thread
};

}  // namespace kv::resp
