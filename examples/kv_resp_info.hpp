// examples/kv_resp_info.hpp - INFO [section ...] in Redis's format, so that
// `redis-cli info` works: sections server, clients, stats, keyspace, and
// ordo (the engine's live counters, ordo/stats.hpp).
//
// The server builds every section but keyspace on its io thread when the
// request is read (info_text()); keyspace needs the keys, so INFO runs as an
// op reading every slot (like DBSIZE), which appends it (info_reply()).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <ordo/stats.hpp>

#include "kv_resp.hpp"

namespace kv::resp {

/// Sections as bits of Plan::num.
enum InfoSection : std::uint32_t {
  kInfoServer = 1,
  kInfoClients = 2,
  kInfoStats = 4,
  kInfoKeyspace = 8,
  kInfoOrdo = 16,
  kInfoAll = 31,
};

/// The sections INFO's arguments name (any case; none, "default", "all" or
/// "everything": all of them). Unknown names select nothing, as in Redis.
inline std::uint32_t info_sections(const std::vector<std::string>& argv) {
  if (argv.size() <= 1) return kInfoAll;
  std::uint32_t s = 0;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    std::string a = argv[i];
    for (char& c : a) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (a == "default" || a == "all" || a == "everything") s |= kInfoAll;
    else if (a == "server") s |= kInfoServer;
    else if (a == "clients") s |= kInfoClients;
    else if (a == "stats") s |= kInfoStats;
    else if (a == "keyspace") s |= kInfoKeyspace;
    else if (a == "ordo") s |= kInfoOrdo;
  }
  return s;
}

/// What the server knows of itself when the request is read (io thread).
struct InfoFacts {
  std::uint16_t port = 0;
  std::int64_t uptime_s = 0;
  std::size_t clients = 0;
  std::uint64_t connections_received = 0;
  std::uint64_t commands = 0;
  std::uint64_t input_bytes = 0;
  std::uint64_t rejected = 0;  ///< accepts that failed
  ordo::EngineStats engine;
};

namespace info_detail {
inline void field(std::string& o, std::string_view name, std::string_view value) {
  o.append(name).append(":").append(value).append("\r\n");
}
inline void field(std::string& o, std::string_view name, std::uint64_t value) { field(o, name, std::to_string(value)); }
inline void section(std::string& o, std::string_view title) {
  if (!o.empty()) o += "\r\n";  // a blank line between sections
  o.append("# ").append(title).append("\r\n");
}
inline std::string ms(std::int64_t ns) { return std::to_string(ns / 1'000'000); }
}  // namespace info_detail

/// Every selected section but keyspace, in Redis's order.
inline std::string info_text(std::uint32_t sections, const InfoFacts& f) {
  using namespace info_detail;
  std::string o;
  if ((sections & kInfoServer) != 0) {
    section(o, "Server");
    // redis-cli reads redis_version (and nothing else) to decide what it may send.
    field(o, "redis_version", "7.0.0");
    field(o, "redis_mode", "standalone");
    field(o, "server_name", "kv_server (ordo)");
    field(o, "multiplexing_api", "asio");
    field(o, "process_id", static_cast<std::uint64_t>(::getpid()));
    field(o, "tcp_port", f.port);
    field(o, "uptime_in_seconds", static_cast<std::uint64_t>(f.uptime_s));
    field(o, "uptime_in_days", static_cast<std::uint64_t>(f.uptime_s / 86400));
  }
  if ((sections & kInfoClients) != 0) {
    section(o, "Clients");
    field(o, "connected_clients", f.clients);
    field(o, "blocked_clients", std::uint64_t{0});
  }
  if ((sections & kInfoStats) != 0) {
    section(o, "Stats");
    field(o, "total_connections_received", f.connections_received);
    field(o, "total_commands_processed", f.commands);
    field(o, "total_net_input_bytes", f.input_bytes);
    field(o, "rejected_connections", f.rejected);
  }
  if ((sections & kInfoOrdo) != 0) {
    const ordo::EngineStats& e = f.engine;
    section(o, "Ordo");
    field(o, "ordo_ops_pushed", e.ops_pushed);
    field(o, "ordo_ops_completed", e.ops_completed);
    field(o, "ordo_ops_in_flight", e.ops_in_flight);
    field(o, "ordo_ops_failed", e.ops_failed);
    field(o, "ordo_uptime_ms", ms(e.uptime_ns));
    // One line per pool and per io kind, as Redis writes a db's line.
    for (const ordo::PoolStats& p : e.pools) {
      field(o, "ordo_pool_" + p.name,
            "workers=" + std::to_string(p.workers) + ",ready=" + std::to_string(p.ready) + ",running=" +
                std::to_string(p.running) + ",idle_ms=" + ms(p.idle_ns) + ",busy_ms=" + ms(p.busy_ns));
    }
    if (!e.io_backend.empty()) field(o, "ordo_io_backend", e.io_backend);
    for (const ordo::IoKindStats& k : e.io) {
      field(o, "ordo_io_" + k.kind,
            "submitted=" + std::to_string(k.submitted) + ",in_flight=" + std::to_string(k.in_flight));
    }
    char rate[32];
    std::snprintf(rate, sizeof rate, "%.4f", e.buffers.hit_rate());
    field(o, "ordo_buffer_pools", e.buffers.pools);
    field(o, "ordo_buffer_hit_rate", rate);
  }
  return o;
}

/// INFO's reply: `text` (info_text()) with the keyspace section when selected.
inline void info_reply(std::string& out, std::uint32_t sections, const std::string& text, std::int64_t keys,
                       std::int64_t expires) {
  std::string o = text;
  if ((sections & kInfoKeyspace) != 0) {
    info_detail::section(o, "Keyspace");
    if (keys > 0) {
      o += "db0:keys=" + std::to_string(keys) + ",expires=" + std::to_string(expires) + ",avg_ttl=0\r\n";
    }
  }
  bulk(out, o);
}

}  // namespace kv::resp
