// tests/resp/resp_test_util.hpp - an in-process RESP server (kv_server's
// RESP mode on its own io thread) and a small blocking RESP client.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <asio.hpp>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kv_resp_server.hpp"

namespace resp_test {

/// kv::resp::Server on a thread of its own; stopped (drained) by the destructor.
class TestServer {
 public:
  explicit TestServer(kv::resp::ServerOptions opt = {}) {
    if (opt.threads == 0) opt.threads = 2;
    server_ = std::make_unique<kv::resp::Server>(io_, opt);
    server_->start();
    stopped_ = ran_.get_future();
    thread_ = std::thread([this] {
      io_.run();
      ran_.set_value();
    });
  }
  ~TestServer() {
    asio::post(io_, [this] { server_->stop(); });
    thread_.join();
    server_.reset();
  }
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  [[nodiscard]] std::uint16_t port() const { return server_->port(); }
  /// Variables guarding keys now (read on the io thread).
  std::size_t variables() {
    std::promise<std::size_t> p;
    asio::post(io_, [&] { p.set_value(server_->variables()); });
    return p.get_future().get();
  }
  /// The server's counters now (read on the io thread).
  kv::resp::ServerStats stats() {
    std::promise<kv::resp::ServerStats> p;
    asio::post(io_, [&] { p.set_value(server_->stats()); });
    return p.get_future().get();
  }
  /// Has the server stop (as SIGTERM does) without waiting for it.
  void post_stop() {
    asio::post(io_, [this] { server_->stop(); });
  }
  /// Waits until the server's io thread has returned (every connection
  /// closed), at most `limit`; true if it has.
  bool wait_stopped(std::chrono::milliseconds limit) {
    return stopped_.wait_for(limit) == std::future_status::ready;
  }

 private:
  asio::io_context io_;  // before server_: outlives the engine's last handlers
  std::unique_ptr<kv::resp::Server> server_;
  std::promise<void> ran_;
  std::future<void> stopped_;
  std::thread thread_;
};

/// A blocking client: requests as argument lists, replies as RESP text
/// (one whole reply each). Every read times out after 30 s (a failure).
class Client {
 public:
  explicit Client(std::uint16_t port) : sock_(io_) {
    sock_.connect({asio::ip::address_v4::loopback(), port});
    sock_.set_option(asio::ip::tcp::no_delay(true));
    timeval tv{30, 0};
    ::setsockopt(sock_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  void send_raw(const std::string& bytes) { asio::write(sock_, asio::buffer(bytes)); }
  /// Sends a request the server may refuse before reading all of it: it
  /// replies and closes, so the rest of the write may meet a closed peer
  /// (EPIPE / ECONNRESET), which is then not an error.
  void send_refused(const std::string& bytes) {
    asio::error_code ec;
    asio::write(sock_, asio::buffer(bytes), ec);
    if (ec && ec != asio::error::broken_pipe && ec != asio::error::connection_reset) {
      throw std::runtime_error("write: " + ec.message());
    }
  }
  void send(const std::vector<std::string>& argv) { send_raw(kv::resp::request(argv)); }
  std::string call(const std::vector<std::string>& argv) {
    send(argv);
    return reply();
  }
  /// Reads one whole reply; throws on EOF.
  std::string reply() {
    std::string out;
    read_value(out);
    return out;
  }
  /// Everything until the server closes the connection.
  std::string read_to_eof() {
    std::string out = std::move(buf_);
    buf_.clear();
    asio::error_code ec;
    char b[4096];
    for (;;) {
      const std::size_t n = sock_.read_some(asio::buffer(b), ec);
      if (ec == asio::error::eof || ec == asio::error::connection_reset) return out;
      if (ec) throw std::runtime_error("read_to_eof: " + ec.message());
      out.append(b, n);
    }
  }
  void shutdown_send() { sock_.shutdown(asio::ip::tcp::socket::shutdown_send); }
  /// Closes the connection (unread replies are dropped).
  void close() {
    asio::error_code ec;
    sock_.close(ec);
  }

 private:
  void fill(std::size_t need) {
    char b[65536];
    while (buf_.size() < need) {
      asio::error_code ec;
      const std::size_t n = sock_.read_some(asio::buffer(b), ec);
      if (ec) throw std::runtime_error("read: " + ec.message());
      buf_.append(b, n);
    }
  }
  std::string line() {
    for (;;) {
      const std::size_t eol = buf_.find("\r\n");
      if (eol != std::string::npos) {
        std::string l = buf_.substr(0, eol + 2);
        buf_.erase(0, eol + 2);
        return l;
      }
      fill(buf_.size() + 1);
    }
  }
  void read_value(std::string& out) {
    const std::string l = line();
    out += l;
    if (l[0] == '$') {
      const long long n = std::stoll(l.substr(1));
      if (n < 0) return;
      fill(static_cast<std::size_t>(n) + 2);
      out += buf_.substr(0, static_cast<std::size_t>(n) + 2);
      buf_.erase(0, static_cast<std::size_t>(n) + 2);
    } else if (l[0] == '*') {
      const long long n = std::stoll(l.substr(1));
      for (long long i = 0; i < n; ++i) read_value(out);
    }
  }

  asio::io_context io_;
  asio::ip::tcp::socket sock_;
  std::string buf_;
};

inline std::string bulk(const std::string& s) { return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n"; }
inline std::string integer(long long n) { return ":" + std::to_string(n) + "\r\n"; }
inline const std::string ok = "+OK\r\n";
inline const std::string nil = "$-1\r\n";

}  // namespace resp_test
