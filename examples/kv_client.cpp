// examples/kv_client.cpp - checks a running kv_server against a serial
// replay: N connections send random requests (seed printed); every reply
// carries the server's acceptance sequence number; replaying all requests
// serially in that order must give every reply the server gave, and the
// final state (DUMP) must equal the replay's. Ends with SHUTDOWN.
//
//   kv_client --port P [--conns N] [--requests R] [--keys K] [--seed S] [--no-shutdown]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "kv_client.hpp"

int main(int argc, char** argv) try {
  unsigned port = 0, conns = 1, requests = 1000, keys = 64;
  bool shutdown = true;
  std::uint64_t seed = std::random_device{}();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&] {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return std::stoull(argv[++i]);
    };
    if (a == "--port") port = static_cast<unsigned>(val());
    else if (a == "--conns") conns = static_cast<unsigned>(val());
    else if (a == "--requests") requests = static_cast<unsigned>(val());
    else if (a == "--keys") keys = static_cast<unsigned>(val());
    else if (a == "--seed") seed = val();
    else if (a == "--no-shutdown") shutdown = false;
    else throw std::runtime_error("unknown argument " + a);
  }
  if (port == 0 || conns == 0 || keys == 0) throw std::runtime_error("need --port, and --conns/--keys >= 1");
  std::printf("kv_client: %u connections x %u requests, %u keys, seed %llu\n", conns, requests, keys,
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  std::vector<std::mt19937_64> rngs;
  for (unsigned c = 0; c < conns; ++c) rngs.emplace_back(seed * 1000003 + c);
  struct Rec {
    std::string request, reply;
    unsigned conn;
  };
  std::map<std::uint64_t, Rec> by_seq;
  std::vector<std::uint64_t> last_seq(conns, 0);
  std::vector<bool> any(conns, false);
  std::int64_t unique = 0;
  kv::drive(static_cast<std::uint16_t>(port), conns,
            [&](unsigned c, unsigned i) { return i < requests ? kv::random_request(rngs[c], keys, ++unique) : std::string(); },
            [&](kv::Exchange&& e) {
              auto w = kv::words(e.reply);
              if (w.size() < 2) throw std::runtime_error("malformed reply '" + e.reply + "'");
              const std::uint64_t seq = std::stoull(w.back());
              // One request in flight per connection: its requests are accepted in send order.
              if (any[e.conn] && seq <= last_seq[e.conn]) throw std::runtime_error("per-connection order broken");
              any[e.conn] = true;
              last_seq[e.conn] = seq;
              const std::string body = e.reply.substr(0, e.reply.rfind(' '));
              if (!by_seq.emplace(seq, Rec{std::move(e.request), body, e.conn}).second) {
                throw std::runtime_error("sequence number " + std::to_string(seq) + " given twice");
              }
            });
  const std::string dump = kv::request_once(static_cast<std::uint16_t>(port), "DUMP");
  // Serial replay in acceptance order.
  std::vector<std::int64_t> vals(keys, 0);
  std::size_t mismatches = 0;
  for (const auto& [seq, r] : by_seq) {
    const std::string want = kv::replay(r.request, vals);
    if (want != r.reply && ++mismatches <= 5) {
      std::fprintf(stderr, "seq %llu conn %u '%s': server replied '%s', serial replay gives '%s'\n",
                   static_cast<unsigned long long>(seq), r.conn, r.request.c_str(), r.reply.c_str(), want.c_str());
    }
  }
  std::string want_dump = "VALUES";
  for (auto v : vals) want_dump += " " + std::to_string(v);
  const std::string got_dump = dump.substr(0, dump.rfind(' '));
  const bool dump_ok = got_dump == want_dump;
  if (!dump_ok) std::fprintf(stderr, "final state differs:\n server: %s\n replay: %s\n", got_dump.c_str(), want_dump.c_str());
  if (shutdown) kv::request_once(static_cast<std::uint16_t>(port), "SHUTDOWN");
  std::printf("kv_client: %zu replies, %zu mismatches, final state %s (seed %llu)\n", by_seq.size(), mismatches,
              dump_ok ? "equal" : "DIFFERENT", static_cast<unsigned long long>(seed));
  if (by_seq.size() != static_cast<std::size_t>(conns) * requests) {
    std::fprintf(stderr, "expected %u replies\n", conns * requests);
    return 1;
  }
  return mismatches == 0 && dump_ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "kv_client: %s\n", e.what());
  return 1;
}
