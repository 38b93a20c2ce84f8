// bench/io/echo.cpp - loopback TCP echo, messages/s at several connection
// counts: an ordo::io server (one coroutine per connection: recv, then send
// it back) on each backend beside a plain Asio server (C++20 coroutines on
// one io_context thread), in the same run, driven by the same client: one
// thread, non-blocking sockets and epoll, one 64-byte message in flight per
// connection, each echo checked. Runs interleave, rotating the first server.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "io_bench.hpp"
#include "ordo/coro.hpp"
#include "ordo/ordo.hpp"

#if defined(ORDO_IO_BENCH_ASIO)
#include <asio.hpp>
#endif

namespace iobench {
namespace {

constexpr std::size_t kMessage = 64;

[[noreturn]] void fail(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

void no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// The load generator. Connects `conns` sockets to `port`, then for the run's
/// length keeps one message in flight on each; returns echoes/s, or -1 if an
/// echo came back wrong.
double drive(std::uint16_t port, unsigned conns, double seconds) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct Conn {
    int fd = -1;
    std::uint64_t seq = 0;
    std::size_t got = 0;
    std::array<unsigned char, kMessage> in{};
  };
  std::vector<Conn> cs(conns);
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) fail("epoll_create1");
  auto message = [](std::size_t c, std::uint64_t seq) {
    std::array<unsigned char, kMessage> m{};
    for (std::size_t i = 0; i < kMessage; ++i) m[i] = static_cast<unsigned char>(c * 7 + seq * 13 + i);
    return m;
  };
  auto send_next = [&](std::size_t c) {
    const auto m = message(c, cs[c].seq);
    if (::send(cs[c].fd, m.data(), m.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(m.size())) fail("client send");
  };
  for (std::size_t c = 0; c < conns; ++c) {
    cs[c].fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (cs[c].fd < 0) fail("client socket (fd limit?)");
    if (::connect(cs[c].fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) fail("client connect");
    no_delay(cs[c].fd);
    ::fcntl(cs[c].fd, F_SETFL, O_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = c;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, cs[c].fd, &ev) != 0) fail("epoll_ctl");
  }
  std::uint64_t echoes = 0;
  bool bad = false;
  const auto start = Clock::now();
  const auto stop = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (std::size_t c = 0; c < conns; ++c) send_next(c);
  std::array<epoll_event, 256> evs{};
  while (Clock::now() < stop && !bad) {
    const int n = ::epoll_wait(ep, evs.data(), static_cast<int>(evs.size()), 10);
    for (int i = 0; i < n; ++i) {
      Conn& k = cs[evs[i].data.u64];
      const ssize_t got = ::recv(k.fd, k.in.data() + k.got, kMessage - k.got, 0);
      if (got <= 0) {
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        bad = true;  // the server closed or failed
        break;
      }
      k.got += static_cast<std::size_t>(got);
      if (k.got < kMessage) continue;
      bad = bad || k.in != message(evs[i].data.u64, k.seq);
      k.got = 0;
      ++k.seq;
      ++echoes;
      send_next(evs[i].data.u64);
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  for (Conn& k : cs) ::close(k.fd);
  ::close(ep);
  return bad ? -1 : static_cast<double>(echoes) / secs;
}

int listen_loopback(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("socket");
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 4096) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    fail("listen");
  }
  port = ntohs(addr.sin_port);
  return fd;
}

// ---------------------------------------------------------------- ordo::io server

ordo::Task<void> echo_conn(ordo::io::Reactor& io, int fd) {
  std::array<std::byte, 4096> buf;
  try {
    for (;;) {
      const std::size_t n = co_await io.recv(fd, buf);
      if (n == 0) break;
      co_await io.send(fd, std::span(buf).first(n)).exact();
    }
  } catch (const ordo::io::IoError&) {
    // the client went away (reset): this connection is done
  }
  ::close(fd);
}

ordo::Task<void> accept_all(ordo::io::Reactor& io, int listen_fd, unsigned conns, ordo::AsyncScope& scope) {
  for (unsigned i = 0; i < conns; ++i) {
    const int fd = co_await io.accept(listen_fd);
    no_delay(fd);
    scope.spawn(echo_conn(io, fd));
  }
}

double ordo_echo(ordo::io::Backend backend, unsigned conns, double seconds, bool coop) {
  std::uint16_t port = 0;
  const int lfd = listen_loopback(port);
  double rate = 0;
  {
    ordo::Engine engine;
    ordo::io::Reactor io(engine, ordo::io::IoOptions{.backend = backend, .cooperative_taskrun = coop, .log = [](std::string_view) {}});
    if (coop && !io.cooperative_taskrun()) throw std::runtime_error("no cooperative task running: " + io.backend_reason());
    ordo::AsyncScope scope;
    scope.spawn(accept_all(io, lfd, conns, scope));
    try {
      rate = drive(port, conns, seconds);  // closing the client sockets ends the connections
    } catch (...) {
      ::shutdown(lfd, SHUT_RDWR);
      scope.sync_join();
      throw;
    }
    scope.sync_join();
  }
  ::close(lfd);
  return rate;
}

// ---------------------------------------------------------------- Asio server

#if defined(ORDO_IO_BENCH_ASIO)
asio::awaitable<void> asio_echo_conn(asio::ip::tcp::socket s) {
  std::array<char, 4096> buf;
  try {
    for (;;) {
      const std::size_t n = co_await s.async_read_some(asio::buffer(buf), asio::use_awaitable);
      co_await asio::async_write(s, asio::buffer(buf.data(), n), asio::use_awaitable);
    }
  } catch (const std::exception&) {
    // eof or reset: done
  }
}

asio::awaitable<void> asio_accept_all(asio::ip::tcp::acceptor& acceptor, unsigned conns) {
  for (unsigned i = 0; i < conns; ++i) {
    asio::ip::tcp::socket s = co_await acceptor.async_accept(asio::use_awaitable);
    s.set_option(asio::ip::tcp::no_delay(true));
    asio::co_spawn(acceptor.get_executor(), asio_echo_conn(std::move(s)), asio::detached);
  }
}

double asio_echo(unsigned conns, double seconds) {
  asio::io_context ctx(1);
  asio::ip::tcp::acceptor acceptor(ctx, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  acceptor.listen(4096);
  const auto port = acceptor.local_endpoint().port();
  asio::co_spawn(ctx, asio_accept_all(acceptor, conns), asio::detached);
  std::thread t([&] { ctx.run(); });
  double rate = -1;
  try {
    rate = drive(port, conns, seconds);
  } catch (...) {
    ctx.stop();
    t.join();
    throw;
  }
  t.join();  // every connection saw eof; the acceptor coroutine has finished
  return rate;
}
#endif

}  // namespace

std::vector<Row> run_echo(const Config& cfg, std::string& md) {
  struct Server {
    std::string name;
    std::function<double(unsigned)> run;
  };
  std::vector<Server> servers;
  for (ordo::io::Backend b : cfg.backends) {
    servers.push_back({std::string("ordo-") + backend_name(b), [&cfg, b](unsigned c) { return ordo_echo(b, c, cfg.seconds, false); }});
    if (b == ordo::io::Backend::uring) {
      // IoOptions::cooperative_taskrun: no interrupt of a busy submitter per completion.
      servers.push_back({"ordo-uring-coop", [&cfg, b](unsigned c) { return ordo_echo(b, c, cfg.seconds, true); }});
    }
  }
#if defined(ORDO_IO_BENCH_ASIO)
  servers.push_back({"asio", [&cfg](unsigned c) { return asio_echo(c, cfg.seconds); }});
  const bool asio = true;
#else
  const bool asio = false;
  std::fprintf(stderr, "ordo_io_bench: built without standalone Asio (libasio-dev): echo without the Asio server\n");
#endif
  std::vector<Row> rows;
  md += "## Loopback TCP echo\n\n";
  md += "One client thread (epoll, non-blocking sockets) keeps one 64-byte message in flight per connection and "
        "checks every echo. Servers: ordo::io, a coroutine per connection (`co_await io.recv`, then "
        "`co_await io.send(...).exact()`), engine with its default workers (one per core); `ordo-uring-coop`: the "
        "same with `IoOptions::cooperative_taskrun` (the kernel does not interrupt a running worker to finish "
        "the requests it submitted; see docs/io.md); Asio " +
        std::string(asio ? "" : "(not built) ") +
        "1.x standalone, C++20 coroutines (`use_awaitable`), one `io_context` thread. Messages/s, median of " +
        std::to_string(cfg.runs) + " runs of " + seconds_text(cfg) + " s (min-max). `vs Asio`: the median of the runs' "
        "own ratios (each run against the Asio run of the same round), min-max beside it.\n\n";
  md += "| connections | server | msgs/s median | min-max | vs Asio | ratio min-max |\n|---:|---|---:|---:|---:|---:|\n";
  for (const unsigned conns : cfg.conns) {
    std::vector<Row> these(servers.size());
    for (unsigned r = 0; r < cfg.runs; ++r) {
      for (std::size_t k = 0; k < servers.size(); ++k) {
        const std::size_t s = (k + r) % servers.size();
        progress(cfg, "echo " + std::to_string(conns) + " connections run " + std::to_string(r + 1) + "/" +
                          std::to_string(cfg.runs) + ": " + servers[s].name);
        double rate = -1;
        try {
          rate = servers[s].run(conns);
        } catch (const std::exception& ex) {
          std::fprintf(stderr, "ordo_io_bench: echo %u %s: %s\n", conns, servers[s].name.c_str(), ex.what());
        }
        these[s].fig.runs.push_back(rate < 0 ? 0 : rate);
        these[s].ok = these[s].ok && rate >= 0;
      }
    }
    const double asio_rate = asio ? these.back().fig.median() : 0;
    for (std::size_t s = 0; s < servers.size(); ++s) {
      Row& row = these[s];
      row.workload = "echo-c" + std::to_string(conns);
      row.engine = servers[s].name;
      row.unit = "msgs/s";
      char ratio[32] = "-";
      char spread[32] = "-";
      if (asio && s + 1 != servers.size() && asio_rate > 0) {
        const Figure ratios = paired_ratios(row.fig, these.back().fig);
        std::snprintf(ratio, sizeof ratio, "%.2f", ratios.median());
        std::snprintf(spread, sizeof spread, "%.2f-%.2f", ratios.min(), ratios.max());
        char extra[128];
        std::snprintf(extra, sizeof extra, "vs_asio=%.3f vs_asio_min=%.3f vs_asio_max=%.3f medians_ratio=%.3f", ratios.median(),
                      ratios.min(), ratios.max(), row.fig.median() / asio_rate);
        row.extra = extra;
      }
      print_result(row);
      md += "| " + std::to_string(conns) + " | " + row.engine + " | " + human(row.fig.median()) + " | " +
            human(row.fig.min()) + "-" + human(row.fig.max()) + " | " + ratio + (row.ok ? "" : " (FAILED)") + " | " +
            spread + " |\n";
      rows.push_back(row);
    }
  }
  md += "\n";
  return rows;
}

}  // namespace iobench
