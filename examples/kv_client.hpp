// examples/kv_client.hpp - a load client for kv_server over plain POSIX
// sockets (no Asio, no ordo): N connections driven by one epoll loop, one
// request in flight per connection; plus a random request generator and an
// independent serial replay of the protocol (see kv_server.hpp).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace kv {

[[noreturn]] inline void sys_fail(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

/// Raises the soft limit on open files to at least `want` (up to the hard limit).
inline void raise_fd_limit(rlim_t want) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) sys_fail("getrlimit");
  if (rl.rlim_cur >= want) return;
  rl.rlim_cur = std::min(want, rl.rlim_max);
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) sys_fail("setrlimit");
}

/// A blocking connect to 127.0.0.1:port; the socket is then made non-blocking.
inline int connect_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) sys_fail("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    sys_fail("connect");
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

/// One request/reply exchange as the client saw it.
struct Exchange {
  unsigned conn = 0;
  std::string request;  ///< without the newline
  std::string reply;    ///< without the newline
  std::int64_t latency_ns = 0;
};

/// Drives `conns` connections; connection c sends next(c, i) for
/// i = 0, 1, ... until it returns "" (one request in flight per
/// connection), then closes. Calls done(exchange) for every reply.
///
/// Lean on purpose, since it shares the machine with the server it loads:
/// a request is sent at once (the socket has room but for rare cases, when
/// the rest waits for EPOLLOUT), and epoll reports only the connections
/// with a reply, so a round costs one epoll_wait however many are open.
inline void drive(std::uint16_t port, unsigned conns, const std::function<std::string(unsigned, unsigned)>& next,
                  const std::function<void(Exchange&&)>& done) {
  raise_fd_limit(conns + 64);
  struct Conn {
    int fd = -1;
    unsigned sent = 0;
    bool want_out = false;  ///< EPOLLOUT armed: part of `out` waits for room
    std::string out, in, request;
    std::chrono::steady_clock::time_point t0;
  };
  struct Epoll {
    int fd = ::epoll_create1(EPOLL_CLOEXEC);
    ~Epoll() {
      if (fd >= 0) ::close(fd);
    }
  } ep;
  if (ep.fd < 0) sys_fail("epoll_create1");
  std::vector<Conn> cs(conns);
  unsigned open = 0;
  auto watch = [&](unsigned c, int op, bool out) {
    epoll_event ev{};
    ev.events = EPOLLIN | (out ? EPOLLOUT : 0U);
    ev.data.u32 = c;
    if (::epoll_ctl(ep.fd, op, cs[c].fd, &ev) != 0) sys_fail("epoll_ctl");
    cs[c].want_out = out;
  };
  auto send_some = [&](unsigned c) {
    Conn& k = cs[c];
    while (!k.out.empty()) {
      const ssize_t n = ::send(k.fd, k.out.data(), k.out.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN) break;
        sys_fail("send");
      }
      k.out.erase(0, static_cast<std::size_t>(n));
    }
    if (k.out.empty() == k.want_out) watch(c, EPOLL_CTL_MOD, !k.out.empty());
  };
  auto start_next = [&](unsigned c) {
    Conn& k = cs[c];
    k.request = next(c, k.sent);
    if (k.request.empty()) {
      ::close(k.fd);  // also leaves the epoll set
      k.fd = -1;
      --open;
      return;
    }
    ++k.sent;
    k.out = k.request + "\n";
    k.t0 = std::chrono::steady_clock::now();
    send_some(c);
  };
  for (unsigned c = 0; c < conns; ++c) {
    cs[c].fd = connect_loopback(port);
    ++open;
    watch(c, EPOLL_CTL_ADD, false);
  }
  for (unsigned c = 0; c < conns; ++c) start_next(c);
  std::vector<epoll_event> events(std::min(conns, 256U));
  char buf[4096];
  while (open > 0) {
    const int ready = ::epoll_wait(ep.fd, events.data(), static_cast<int>(events.size()), 30000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) throw std::runtime_error("kv client: no progress for 30 s (server stuck?)");
    for (int e = 0; e < ready; ++e) {
      const unsigned c = events[static_cast<std::size_t>(e)].data.u32;
      const std::uint32_t what = events[static_cast<std::size_t>(e)].events;
      Conn& k = cs[c];
      if (k.fd < 0) continue;
      if ((what & EPOLLOUT) != 0 && !k.out.empty()) send_some(c);
      if ((what & (EPOLLIN | EPOLLHUP | EPOLLERR)) == 0) continue;
      const ssize_t n = ::recv(k.fd, buf, sizeof buf, 0);
      if (n == 0) throw std::runtime_error("kv client: server closed connection " + std::to_string(c));
      if (n < 0) {
        if (errno == EAGAIN) continue;
        sys_fail("recv");
      }
      k.in.append(buf, static_cast<std::size_t>(n));
      const std::size_t nl = k.in.find('\n');
      if (nl == std::string::npos) continue;
      if (nl + 1 != k.in.size() || !k.out.empty()) throw std::runtime_error("kv client: reply to a request not sent");
      Exchange x;
      x.conn = c;
      x.request = std::move(k.request);
      x.reply = k.in.substr(0, nl);
      x.latency_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - k.t0).count();
      k.in.clear();
      done(std::move(x));
      start_next(c);
    }
  }
}

/// One exchange on a fresh connection (blocking), e.g. DUMP or SHUTDOWN.
inline std::string request_once(std::uint16_t port, const std::string& request) {
  std::string reply;
  drive(port, 1, [&](unsigned, unsigned i) { return i == 0 ? request : std::string(); },
        [&](Exchange&& e) { reply = std::move(e.reply); });
  return reply;
}

/// A random request over `keys` keys: GET, PUT (value `unique`, distinct per
/// request), INCR, MGET and MINCR (2-4 keys).
inline std::string random_request(std::mt19937_64& rng, unsigned keys, std::int64_t unique) {
  auto key = [&] { return std::to_string(rng() % keys); };
  const unsigned p = static_cast<unsigned>(rng() % 100);
  auto several = [&] {
    std::string s;
    const unsigned n = 2 + static_cast<unsigned>(rng() % 3);
    for (unsigned i = 0; i < n; ++i) s += " " + key();
    return s;
  };
  if (p < 30) return "GET " + key();
  if (p < 50) return "PUT " + key() + " " + std::to_string(unique);
  if (p < 80) return "INCR " + key() + " " + std::to_string(static_cast<int>(rng() % 201) - 100);
  if (p < 90) return "MGET" + several();
  return "MINCR " + std::to_string(static_cast<int>(rng() % 21) - 10) + several();
}

/// Splits a reply "WORD a b ... seq" into its words.
inline std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> w;
  std::istringstream in(s);
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

/// The protocol, executed serially: what `request` replies (without the
/// sequence number) against `vals`, which it updates. Written apart from the
/// server on purpose.
inline std::string replay(const std::string& request, std::vector<std::int64_t>& vals) {
  const auto w = words(request);
  auto k = [&](std::size_t i) { return static_cast<std::size_t>(std::stoul(w[i])); };
  auto list = [&](std::size_t from) {
    std::string s = "VALUES";
    for (std::size_t i = from; i < w.size(); ++i) s += " " + std::to_string(vals[k(i)]);
    return s;
  };
  if (w[0] == "GET") return "VALUE " + std::to_string(vals[k(1)]);
  if (w[0] == "PUT") {
    vals[k(1)] = std::stoll(w[2]);
    return "OK";
  }
  if (w[0] == "INCR") return "VALUE " + std::to_string(vals[k(1)] += std::stoll(w[2]));
  if (w[0] == "MGET") return list(1);
  if (w[0] == "MINCR") {
    for (std::size_t i = 2; i < w.size(); ++i) vals[k(i)] += std::stoll(w[1]);
    return list(2);
  }
  throw std::runtime_error("replay: unexpected request '" + request + "'");
}

}  // namespace kv
