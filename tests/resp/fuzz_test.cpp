// Random and truncated RESP frames against kv_server's RESP mode, while
// other connections keep writing: every garbage connection is answered or
// closed (never hangs), the writers are served throughout, and no
// acknowledged write is lost. The seed is printed; ORDO_RESP_FUZZ_SEED
// replays one, ORDO_RESP_FUZZ_CONNS sets the number of garbage connections.
#include <cstdlib>
#include <random>
#include <thread>

#include "resp/resp_test_util.hpp"

namespace {

using namespace resp_test;

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

/// A valid request on fuzz keys: any command, often with bad arguments.
std::string random_request(std::mt19937_64& rng) {
  static const char* cmds[] = {"GET", "SET", "DEL", "EXISTS", "INCR", "INCRBY", "DECR", "MGET", "MSET", "APPEND",
                               "STRLEN", "DBSIZE", "PING", "COMMAND", "TTL", "PTTL", "ECHO", "NOPE", "get", "SeT"};
  std::vector<std::string> argv{cmds[rng() % std::size(cmds)]};
  const unsigned n = static_cast<unsigned>(rng() % 5);
  for (unsigned i = 0; i < n; ++i) {
    switch (rng() % 5) {
      case 0: argv.push_back("fz" + std::to_string(rng() % 8)); break;
      case 1: argv.push_back(std::to_string(static_cast<std::int64_t>(rng()))); break;
      case 2: argv.push_back(rng() % 2 ? "EX" : "PX"); break;
      case 3: argv.push_back(std::to_string(rng() % 100)); break;
      default: {
        std::string b(rng() % 40, '\0');
        for (char& ch : b) ch = static_cast<char>(rng());
        argv.push_back(b);
      }
    }
  }
  return kv::resp::request(argv);
}

/// The bytes of one garbage connection.
std::string garbage(std::mt19937_64& rng, std::size_t limit) {
  std::string s;
  const unsigned frames = 1 + static_cast<unsigned>(rng() % 4);
  for (unsigned f = 0; f < frames; ++f) s += random_request(rng);
  switch (rng() % 8) {
    case 0: s.resize(rng() % (s.size() + 1)); break;  // truncated anywhere
    case 1: {                                          // random bytes
      std::string b(rng() % 200, '\0');
      for (char& ch : b) ch = static_cast<char>(rng());
      s += b;
      break;
    }
    case 2: s[rng() % s.size()] = static_cast<char>(rng()); break;  // one byte flipped
    case 3: s += "*1\r\n$" + std::to_string(limit + 1) + "\r\n"; break;  // over the limit
    case 4: s += "*3\r\n$3\r\nSET\r\n$3\r\nfz1\r\n$5\r\nab"; break;      // truncated bulk
    case 5: s += "*99999999999\r\n"; break;
    case 6: s += std::string(rng() % 100, '*'); break;
    default: break;  // only requests (maybe bad arguments)
  }
  return s;
}

TEST(RespFuzz, GarbageNeverHurtsOtherConnectionsOrAckedWrites) {
  const std::uint64_t seed = env_or("ORDO_RESP_FUZZ_SEED", std::random_device{}());
  const unsigned conns = static_cast<unsigned>(env_or("ORDO_RESP_FUZZ_CONNS", 300));
  std::printf("resp fuzz: seed %llu (ORDO_RESP_FUZZ_SEED=%llu replays it), %u garbage connections\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed), conns);
  std::fflush(stdout);
  for (unsigned shards : {0U, 8U}) {
    SCOPED_TRACE("shards " + std::to_string(shards) + ", seed " + std::to_string(seed));
    kv::resp::ServerOptions o;
    o.shards = shards;
    o.limits.max_request_bytes = 4096;
    TestServer s(o);
    std::atomic<bool> fuzzing{true};
    // Writers: distinct keys, each write acknowledged before the next; some pipelined.
    std::vector<std::vector<std::string>> acked(2);
    std::vector<std::thread> writers;
    for (unsigned w = 0; w < acked.size(); ++w) {
      writers.emplace_back([&, w] {
        Client c(s.port());
        for (unsigned i = 0; fuzzing || i < 50; ++i) {
          const std::string key = "ack" + std::to_string(w) + ":" + std::to_string(i);
          const std::string value = "v" + std::to_string(i) + std::string(i % 5, '\0');
          if (i % 3 == 0) {
            c.send_raw(kv::resp::request({"SET", key, value}) + kv::resp::request({"GET", key}));
            ASSERT_EQ(c.reply(), ok);
            ASSERT_EQ(c.reply(), bulk(value));
          } else {
            ASSERT_EQ(c.call({"SET", key, value}), ok);
          }
          acked[w].push_back(value);
        }
      });
    }
    std::mt19937_64 rng(seed + shards);
    for (unsigned i = 0; i < conns; ++i) {
      Client g(s.port());
      const std::string bytes = garbage(rng, o.limits.max_request_bytes);
      g.send_raw(bytes);
      g.shutdown_send();
      // The server answers what was whole and closes: read_to_eof returns
      // (a hang would hit the client's 30 s receive timeout and throw).
      ASSERT_NO_THROW(g.read_to_eof()) << "garbage connection " << i;
    }
    fuzzing = false;
    for (auto& t : writers) t.join();
    Client c(s.port());
    EXPECT_EQ(c.call({"PING"}), "+PONG\r\n");
    for (unsigned w = 0; w < acked.size(); ++w) {
      for (std::size_t i = 0; i < acked[w].size(); ++i) {
        ASSERT_EQ(c.call({"GET", "ack" + std::to_string(w) + ":" + std::to_string(i)}), bulk(acked[w][i]))
            << "writer " << w << " write " << i;
      }
    }
  }
}

}  // namespace
