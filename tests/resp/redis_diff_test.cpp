// kv_server's RESP mode against redis-server: the same seeded random
// sequence of string commands (every implemented command and option,
// integer and float edge cases, wrong arities, expiries) goes to both, and
// their replies must be equal byte for byte, except where Redis itself is
// not deterministic: TTL within 1 s (PTTL within 1,000 ms), KEYS / SCAN as
// sets, RANDOMKEY as nil or not. The test starts its own redis-server on a
// free port and skips, saying so, where none is installed (Debian package
// redis-server; scripts/dev.sh test installs it). The seed is printed;
// ORDO_RESP_DIFF_SEED replays one, ORDO_RESP_DIFF_COMMANDS sets the count.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <set>

#include "resp/resp_test_util.hpp"

namespace {

using namespace resp_test;

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

/// The path of redis-server on PATH, or "".
std::string find_redis_server() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/usr/local/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    const std::size_t colon = std::min(dirs.find(':', at), dirs.size());
    const std::string candidate = dirs.substr(at, colon - at) + "/redis-server";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    at = colon + 1;
  }
  return "";
}

/// A port no one listens on now (the kernel's pick for a socket closed again).
std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// redis-server as a child process, without persistence; SIGTERM at the end.
class RedisServer {
 public:
  explicit RedisServer(const std::string& binary) : port_(free_port()) {
    std::fflush(stdout);  // or the child's exit would print what is buffered again
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      std::freopen("/dev/null", "w", stdout);
      ::execl(binary.c_str(), binary.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
              "--appendonly", "no", "--daemonize", "no", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
  }
  ~RedisServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  /// A client once the server accepts connections (bounded wait for a child
  /// process to start listening).
  std::unique_ptr<Client> connect() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      try {
        return std::make_unique<Client>(port_);
      } catch (const std::exception&) {
        if (std::chrono::steady_clock::now() > until || ::waitpid(pid_, nullptr, WNOHANG) != 0) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }

 private:
  std::uint16_t port_;
  pid_t pid_ = -1;
};

/// Random requests over a few keys, often with bad arguments.
class Generator {
 public:
  explicit Generator(std::uint64_t seed) : rng_(seed) {}

  std::vector<std::string> next() {
    static const char* cmds[] = {
        "GET",     "SET",      "SETNX",   "SETEX",     "PSETEX",    "GETSET", "GETDEL",  "MGET",        "MSET",
        "MSETNX",  "DEL",      "EXISTS",  "TOUCH",     "INCR",      "DECR",   "INCRBY",  "DECRBY",      "INCRBYFLOAT",
        "APPEND",  "STRLEN",   "GETRANGE", "SUBSTR",   "SETRANGE",  "TTL",    "PTTL",    "EXPIRE",      "PEXPIRE",
        "EXPIREAT", "PEXPIREAT", "PERSIST", "TYPE",    "RENAME",    "KEYS",   "SCAN",    "RANDOMKEY",   "DBSIZE",
        "OBJECT",  "PING",     "ECHO",    "NOPE",      "set",       "gEt",    "FLUSHDB"};
    std::string cmd = cmds[pick(std::size(cmds))];
    if ((cmd == "FLUSHDB") && pick(20) != 0) cmd = "SET";  // rarely: it empties the keyspace
    std::vector<std::string> a{cmd};
    std::string up = cmd;
    for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const bool bad_arity = pick(25) == 0;
    if (up == "SET") {
      a.push_back(key());
      a.push_back(value());
      const unsigned opts = static_cast<unsigned>(pick(4));
      for (unsigned i = 0; i < opts; ++i) {
        switch (pick(9)) {
          case 0: a.push_back(pick(2) ? "NX" : "nx"); break;
          case 1: a.push_back("XX"); break;
          case 2: a.push_back("GET"); break;
          case 3: a.push_back("KEEPTTL"); break;
          case 4: a.push_back("EX"); a.push_back(expire_arg(false)); break;
          case 5: a.push_back("PX"); a.push_back(expire_arg(true)); break;
          case 6: a.push_back("EXAT"); a.push_back(std::to_string(unix_s() + 1000 + pick(5000))); break;
          case 7: a.push_back("PXAT"); a.push_back(std::to_string(unix_ms() + 1000000 + pick(5000000))); break;
          default: a.push_back(pick(2) ? "EX" : "BOGUS"); break;  // EX without its value, or a bad option
        }
      }
    } else if (up == "SETEX" || up == "PSETEX") {
      a.push_back(key());
      a.push_back(expire_arg(up == "PSETEX"));
      a.push_back(value());
    } else if (up == "SETNX" || up == "GETSET" || up == "APPEND") {
      a.push_back(key());
      a.push_back(value());
    } else if (up == "INCRBY" || up == "DECRBY") {
      a.push_back(key());
      a.push_back(integer_arg());
    } else if (up == "INCRBYFLOAT") {
      a.push_back(key());
      a.push_back(float_arg());
    } else if (up == "MGET" || up == "DEL" || up == "EXISTS" || up == "TOUCH") {
      for (std::size_t i = 0, n = 1 + pick(4); i < n; ++i) a.push_back(key());
    } else if (up == "MSET" || up == "MSETNX") {
      for (std::size_t i = 0, n = 1 + pick(3); i < n; ++i) {
        a.push_back(key());
        a.push_back(value());
      }
    } else if (up == "GETRANGE" || up == "SUBSTR") {
      a.push_back(key());
      a.push_back(range_arg());
      a.push_back(range_arg());
    } else if (up == "SETRANGE") {
      a.push_back(key());
      a.push_back(pick(10) == 0 ? integer_arg() : std::to_string(pick(12)));
      a.push_back(pick(5) == 0 ? "" : value());
    } else if (up == "EXPIRE" || up == "PEXPIRE" || up == "EXPIREAT" || up == "PEXPIREAT") {
      a.push_back(key());
      const bool ms = up[0] == 'P';
      if (up.size() > 7) {  // ...AT: absolute, sometimes in the past (the key goes at once)
        const std::int64_t base = ms ? unix_ms() : unix_s();
        a.push_back(pick(4) == 0 ? std::to_string(base - 100 - static_cast<std::int64_t>(pick(1000)))
                                 : std::to_string(base + (ms ? 1000000 : 1000) + static_cast<std::int64_t>(pick(5000))));
      } else {
        a.push_back(pick(5) == 0 ? std::string(pick(2) ? "-5" : "0") : expire_arg(ms));
      }
      for (std::size_t i = 0, n = pick(3); i < n; ++i) {
        static const char* f[] = {"NX", "XX", "GT", "LT", "gt", "ZZ"};
        a.push_back(f[pick(std::size(f))]);
      }
    } else if (up == "RENAME") {
      a.push_back(key());
      a.push_back(key());
    } else if (up == "KEYS") {
      a.push_back(pattern());
    } else if (up == "SCAN") {
      static const char* cursors[] = {"x", "", " 1", "1x", "99999999999999999999999", "-0"};  // "" and "-0" are 0
      a.push_back(pick(5) == 0 ? cursors[pick(std::size(cursors))] : "0");
      if (pick(2)) {
        a.push_back("MATCH");
        a.push_back(pattern());
      }
      a.push_back("COUNT");
      a.push_back(pick(10) == 0 ? "0" : "1000000");  // one call sees every key in both servers
      if (pick(5) == 0) {
        a.push_back("TYPE");
        a.push_back(pick(2) ? "string" : "list");
      }
    } else if (up == "OBJECT") {
      a.push_back(pick(8) == 0 ? "FREQX" : "ENCODING");
      a.push_back(key());
    } else if (up == "ECHO") {
      a.push_back(value());
    } else if (up == "PING") {
      if (pick(2)) a.push_back(value());
    } else if (up == "NOPE") {
      for (std::size_t i = 0, n = pick(5); i < n; ++i) a.push_back(pick(4) == 0 ? std::string(60, 'y') : value());
    } else if (up != "RANDOMKEY" && up != "DBSIZE" && up != "FLUSHDB") {
      a.push_back(key());  // GET GETDEL INCR DECR STRLEN TTL PTTL PERSIST TYPE
    }
    if (bad_arity) {
      if (pick(2) && a.size() > 1) a.pop_back();
      else a.push_back(key());
    }
    return a;
  }

 private:
  std::size_t pick(std::size_t n) { return static_cast<std::size_t>(rng_() % n); }
  static std::int64_t unix_ms() { return kv::resp::now_ms(); }
  static std::int64_t unix_s() { return kv::resp::now_ms() / 1000; }
  std::string key() {
    static const char* odd[] = {"", "a b", "k*", "k?", "[k]", "\\k"};
    return pick(12) == 0 ? odd[pick(std::size(odd))] : "k" + std::to_string(pick(8));
  }
  std::string integer_arg() {
    static const char* edge[] = {"0",  "-0", "00", "007", "+1", " 1", "1 ", "-1", "9223372036854775807",
                                 "-9223372036854775808", "9223372036854775808", "-9223372036854775809", "1.5",
                                 "abc", "", "12345678901234567890", "-", "0x10"};
    return pick(3) == 0 ? edge[pick(std::size(edge))] : std::to_string(static_cast<std::int64_t>(pick(200)) - 100);
  }
  std::string float_arg() {
    static const char* edge[] = {"0.1", "-0.1", "1e3", "3.0e3", "1.5", "inf", "-inf", "nan", "1e400", "abc", "",
                                 " 1", "0x10", "5.0", "10.5e-3", "1e-400", "-0", "7"};
    return pick(2) == 0 ? edge[pick(std::size(edge))] : integer_arg();
  }
  std::string value() {
    switch (pick(6)) {
      case 0: return integer_arg();
      case 1: return float_arg();
      case 2: return std::string(pick(60), static_cast<char>('a' + pick(26)));  // embstr and raw sizes
      case 3: return std::string("v\r\n\0x", 5);
      default: return "v" + std::to_string(pick(100));
    }
  }
  std::string expire_arg(bool ms) {
    static const char* edge[] = {"0", "-1", "007", "+5", "abc", "9223372036854775807", "9223372036854775", "1.5", ""};
    if (pick(5) == 0) return edge[pick(std::size(edge))];
    return std::to_string(ms ? 1000000 + pick(5000000) : 1000 + pick(5000));  // never passes during the test
  }
  std::string range_arg() {
    static const char* edge[] = {"-1", "-100", "100", "0", "9223372036854775807", "-9223372036854775808", "x", "01"};
    return pick(3) == 0 ? edge[pick(std::size(edge))] : std::to_string(static_cast<std::int64_t>(pick(14)) - 7);
  }
  std::string pattern() {
    static const char* p[] = {"*", "k*", "k?", "k[0-3]", "k[^0-3]", "*[", "\\k*", "?", "", "k1", "[a-z]*", "k[3-1]"};
    return p[pick(std::size(p))];
  }
  std::mt19937_64 rng_;
};

/// The elements of an array reply, sorted (KEYS, SCAN's second element).
std::multiset<std::string> elements(const std::string& reply, std::size_t at) {
  std::multiset<std::string> out;
  std::size_t eol = reply.find("\r\n", at);
  const long long n = std::stoll(reply.substr(at + 1, eol - at - 1));
  at = eol + 2;
  for (long long i = 0; i < n; ++i) {
    eol = reply.find("\r\n", at);
    const std::size_t len = std::stoull(reply.substr(at + 1, eol - at - 1));
    out.insert(reply.substr(eol + 2, len));
    at = eol + 2 + len + 2;
  }
  return out;
}

/// A reply or argument with CR, LF and NUL shown as escapes.
std::string shown(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\r') out += "\\r";
    else if (c == '\n') out += "\\n";
    else if (c == '\0') out += "\\0";
    else out += c;
  }
  return out;
}

/// Whether two replies to `req` agree, allowing what Redis leaves open.
bool agree(const std::vector<std::string>& req, const std::string& redis, const std::string& ours) {
  if (redis == ours) return true;
  std::string up = req[0];
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if ((up == "TTL" || up == "PTTL") && redis[0] == ':' && ours[0] == ':') {
    const long long a = std::stoll(redis.substr(1)), b = std::stoll(ours.substr(1));
    if (a < 0 || b < 0) return false;
    return std::llabs(a - b) <= (up == "TTL" ? 1 : 1000);
  }
  if (up == "KEYS" && redis[0] == '*' && ours[0] == '*') return elements(redis, 0) == elements(ours, 0);
  if (up == "SCAN" && redis.rfind("*2\r\n$1\r\n0\r\n", 0) == 0 && ours.rfind("*2\r\n$1\r\n0\r\n", 0) == 0) {
    return elements(redis, 11) == elements(ours, 11);
  }
  if (up == "RANDOMKEY") return (redis == "$-1\r\n") == (ours == "$-1\r\n");
  return false;
}

class RespDiff : public ::testing::TestWithParam<unsigned> {};  // shards (0: a variable per key)

TEST_P(RespDiff, RepliesMatchRedisServer) {
  const std::string binary = find_redis_server();
  if (binary.empty()) {
    GTEST_SKIP() << "redis-server not found on PATH (Debian package redis-server; scripts/dev.sh test installs it)";
  }
  const std::uint64_t seed = env_or("ORDO_RESP_DIFF_SEED", std::random_device{}());
  const std::size_t count = env_or("ORDO_RESP_DIFF_COMMANDS", 20000);
  std::printf("RespDiff: seed %llu, %zu commands (ORDO_RESP_DIFF_SEED=%llu replays)\n",
              static_cast<unsigned long long>(seed), count, static_cast<unsigned long long>(seed));
  SCOPED_TRACE("seed " + std::to_string(seed));
  RedisServer redis(binary);
  auto rc = redis.connect();
  kv::resp::ServerOptions o;
  o.shards = GetParam();
  TestServer ours(o);
  Client oc(ours.port());
  ASSERT_EQ(rc->call({"FLUSHALL"}), ok);
  Generator gen(seed);
  std::size_t mismatches = 0;
  constexpr std::size_t kBatch = 50;  // pipelined: the same batch to each server, then the replies
  for (std::size_t done = 0; done < count && mismatches < 10;) {
    std::vector<std::vector<std::string>> reqs;
    std::string bytes;
    for (std::size_t i = 0; i < kBatch && done + i < count; ++i) {
      reqs.push_back(gen.next());
      bytes += kv::resp::request(reqs.back());
    }
    rc->send_raw(bytes);
    oc.send_raw(bytes);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const std::string r = rc->reply();
      const std::string k = oc.reply();
      if (agree(reqs[i], r, k)) continue;
      ++mismatches;
      std::string args;
      for (const auto& a : reqs[i]) args += "'" + shown(a) + "' ";
      ADD_FAILURE() << "command " << done + i << ": " << args << "\n  redis-server: " << shown(r)
                    << "\n  kv_server:    " << shown(k);
    }
    done += reqs.size();
  }
  EXPECT_EQ(mismatches, 0U);
}

INSTANTIATE_TEST_SUITE_P(Schemes, RespDiff, ::testing::Values(0U, 8U),
                         [](const ::testing::TestParamInfo<unsigned>& p) {
                           return p.param == 0 ? std::string("PerKey") : "Shards" + std::to_string(p.param);
                         });

}  // namespace
