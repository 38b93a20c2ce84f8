// bench/asio/asio_bench.cpp - the kv_server example (examples/kv_server.hpp)
// with requests offloaded to the engine (ordo::asio::push + use_awaitable)
// beside the same server doing the work inline on its io_context thread, in
// one run: requests/s and p50/p99 latency, at several connection counts and
// amounts of work per request.
//
//   ordo_asio_bench [--runs R] [--requests N] [--conns 1,8,64] [--work 0,10,50]
//                   [--keys K] [--workers W] [--modes inline,engine,adaptive] [--quick]
//
// Server (one io thread + the engine's workers) and client (plain sockets,
// one epoll thread, one request in flight per connection) share the
// process and the machine. Requests: 50% GET, 50% INCR on K keys (default
// 1024: few conflicts). Each figure is the median of R runs, the modes
// alternating run by run so drift hits both alike; a ratio is the median of
// the runs' own ratios (each run's modes measured back to back), with their
// min-max. Before the table: the machine's own loopback round trip (two
// threads, blocking sockets, no server), the floor of any one-connection
// latency here.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../../examples/kv_client.hpp"
#include "../../examples/kv_server.hpp"

namespace {

struct Figure {
  double rps = 0, p50_us = 0, p99_us = 0;
};

Figure run_once(kv::Mode mode, bool adaptive, unsigned conns, unsigned work_us, unsigned requests, unsigned keys, unsigned workers,
                unsigned seed) {
  asio::io_context io;
  kv::ServerOptions opt;
  opt.mode = mode;
  opt.keys = keys;
  opt.work_us = work_us;
  opt.workers = workers;
  opt.inline_ready_below_us = adaptive ? 5 : 0;
  kv::Server server(io, opt, 0);
  server.start();
  std::thread io_thread([&] { io.run(); });
  const unsigned per_conn = std::max(1U, requests / conns);
  std::vector<std::mt19937> rngs;
  for (unsigned c = 0; c < conns; ++c) rngs.emplace_back(seed + c);
  std::vector<std::int64_t> lat;
  lat.reserve(static_cast<std::size_t>(per_conn) * conns);
  const auto t0 = std::chrono::steady_clock::now();
  kv::drive(server.port(), conns,
            [&](unsigned c, unsigned i) -> std::string {
              if (i >= per_conn) return {};
              const unsigned k = rngs[c]() % keys;
              return (rngs[c]() & 1) ? "GET " + std::to_string(k) : "INCR " + std::to_string(k) + " 1";
            },
            [&](kv::Exchange&& e) { lat.push_back(e.latency_ns); });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  kv::request_once(server.port(), "SHUTDOWN");
  io_thread.join();
  std::sort(lat.begin(), lat.end());
  Figure f;
  f.rps = static_cast<double>(lat.size()) / secs;
  f.p50_us = static_cast<double>(lat[lat.size() / 2]) / 1e3;
  f.p99_us = static_cast<double>(lat[std::min(lat.size() - 1, lat.size() * 99 / 100)]) / 1e3;
  return f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

/// Round trips of a 16-byte message between two threads over a loopback TCP
/// connection (blocking sockets, TCP_NODELAY): p50 and p99 in us. What one
/// connection costs on this machine before any server code runs.
Figure loopback_round_trip(unsigned trips) {
  using asio::ip::tcp;
  asio::io_context ctx;
  tcp::acceptor acceptor(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  tcp::socket client(ctx);
  client.connect(acceptor.local_endpoint());  // completed in the backlog, accepted next
  tcp::socket server = acceptor.accept();
  client.set_option(tcp::no_delay(true));
  server.set_option(tcp::no_delay(true));
  std::thread echo([&server] {
    char b[16];
    asio::error_code ec;
    while (asio::read(server, asio::buffer(b), ec) == sizeof b && asio::write(server, asio::buffer(b), ec) == sizeof b) {
    }
  });
  std::vector<double> us;
  char b[16] = {};
  asio::error_code ec;
  for (unsigned i = 0; i < trips; ++i) {
    const auto t = std::chrono::steady_clock::now();
    if (asio::write(client, asio::buffer(b), ec) != sizeof b || asio::read(client, asio::buffer(b), ec) != sizeof b) break;
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count());
  }
  client.shutdown(tcp::socket::shutdown_send, ec);  // ends the echo's read
  echo.join();
  if (us.size() != trips) throw std::runtime_error("loopback round trip failed: " + ec.message());
  std::sort(us.begin(), us.end());
  Figure f;
  f.rps = static_cast<double>(us.size()) / (std::accumulate(us.begin(), us.end(), 0.0) / 1e6);
  f.p50_us = us[us.size() / 2];
  f.p99_us = us[us.size() * 99 / 100];
  return f;
}

/// "median (min-max)" of per-run ratios a[r] / b[r]; "-" where either mode did not run.
std::string paired_ratio(const std::vector<double>& a, const std::vector<double>& b, bool ran) {
  if (!ran) return "-";
  std::vector<double> r;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(b[i] > 0 ? a[i] / b[i] : 0);
  if (r.empty()) return "-";
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f (%.2f-%.2f)", median(r), *lo, *hi);
  return buf;
}

std::string cell(bool ran, const char* fmt, double x, double y = 0) {
  if (!ran) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, x, y);
  return buf;
}

std::vector<unsigned> list(const std::string& s) {
  std::vector<unsigned> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');) out.push_back(static_cast<unsigned>(std::stoul(x)));
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  unsigned runs = 5, requests = 20000, keys = 1024, workers = 0;
  std::vector<unsigned> conns{1, 8, 64}, work{0, 10, 50};
  bool want[3] = {true, true, true};  // inline, engine, adaptive (--modes: profile one alone)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&] {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--runs") runs = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--requests") requests = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--conns") conns = list(val());
    else if (a == "--work") work = list(val());
    else if (a == "--keys") keys = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--workers") workers = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--modes") {
      const std::string m = "," + val() + ",";
      const char* names[3] = {",inline,", ",engine,", ",adaptive,"};
      for (int k = 0; k < 3; ++k) want[k] = m.find(names[k]) != std::string::npos;
    }
    else if (a == "--quick") {
      runs = 1;
      requests = 500;
      conns = {1, 8};
      work = {0, 10};
    } else {
      std::fprintf(stderr, "usage: ordo_asio_bench [--runs R] [--requests N] [--conns 1,8,64] [--work 0,10,50] "
                           "[--keys K] [--workers W] [--modes inline,engine,adaptive] [--quick]\n");
      return 2;
    }
  }
  std::printf("ordo_asio_bench: %u runs (median), %u requests per run, %u keys, %u hardware threads, engine workers %s\n",
              runs, requests, keys, std::thread::hardware_concurrency(),
              workers == 0 ? "= hardware threads" : std::to_string(workers).c_str());
  std::printf("engine: ordo::asio::push as is (a worker, or the io thread where offloading would only add wake-ups);\n"
              "adaptive: requests under 5 us of work pushed with FnProperty::async (run on the io thread when their\n"
              "keys are free), the rest as engine\n");
  const Figure rt = loopback_round_trip(5000);
  std::printf("loopback round trip on this machine (two threads, blocking sockets, no server): p50 %.1f us, p99 %.1f us "
              "(%.0f per second)\n",
              rt.p50_us, rt.p99_us, rt.rps);
  std::printf("ratios: median of the runs' own ratios (min-max)\n");
  std::printf("| conns | work us | inline req/s | engine req/s | engine/inline | adaptive/inline | inline p50/p99 us | "
              "engine p50/p99 us | adaptive p50/p99 us |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (unsigned w : work) {
    for (unsigned c : conns) {
      std::vector<double> rps[3], p50[3], p99[3];
      for (unsigned r = 0; r < runs; ++r) {
        for (int m = 0; m < 3; ++m) {
          const int mode = static_cast<int>((static_cast<unsigned>(m) + r) % 3);  // rotate which mode goes first
          if (!want[mode]) continue;
          const Figure f = run_once(mode == 0 ? kv::Mode::inline_ : kv::Mode::engine, mode == 2, c, w, requests, keys,
                                    workers, r);
          rps[mode].push_back(f.rps);
          p50[mode].push_back(f.p50_us);
          p99[mode].push_back(f.p99_us);
        }
      }
      std::printf("| %u | %u | %s | %s | %s | %s | %s | %s | %s |\n", c, w,
                  cell(want[0], "%.0f", want[0] ? median(rps[0]) : 0).c_str(),
                  cell(want[1], "%.0f", want[1] ? median(rps[1]) : 0).c_str(),
                  paired_ratio(rps[1], rps[0], want[0] && want[1]).c_str(),
                  paired_ratio(rps[2], rps[0], want[0] && want[2]).c_str(),
                  cell(want[0], "%.1f / %.1f", want[0] ? median(p50[0]) : 0, want[0] ? median(p99[0]) : 0).c_str(),
                  cell(want[1], "%.1f / %.1f", want[1] ? median(p50[1]) : 0, want[1] ? median(p99[1]) : 0).c_str(),
                  cell(want[2], "%.1f / %.1f", want[2] ? median(p50[2]) : 0, want[2] ? median(p99[2]) : 0).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ordo_asio_bench: %s\n", e.what());
  return 1;
}
