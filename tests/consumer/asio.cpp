// A program outside the ordo tree, built against an installed ordo (target
// ordo::asio): an Asio server on loopback whose handler, an Asio coroutine,
// adds each request to a total kept by engine ops (ordo::asio::push) and
// replies with the running sum.
#include <ordo/asio.hpp>
#include <ordo/ordo.hpp>

#include <asio.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <stop_token>

namespace {

using asio::ip::tcp;

// Built with clang++ too (consumer_clang): push_signature_t of a non-callable
// is a substitution failure there as with g++, not a hard error.
template <class F>
concept has_push_signature = requires { typename ordo::asio::push_signature_t<F>; };
static_assert(!has_push_signature<std::stop_token>);
static_assert(has_push_signature<std::int64_t (*)()>);

asio::awaitable<void> serve(tcp::acceptor& acceptor, ordo::Engine& engine, ordo::Var total_var,
                            std::int64_t& total, int requests) {
  tcp::socket socket = co_await acceptor.async_accept(asio::use_awaitable);
  for (int i = 0; i < requests; ++i) {
    std::int64_t x = 0;
    co_await asio::async_read(socket, asio::buffer(&x, sizeof x), asio::use_awaitable);
    // Runs on an engine worker, ordered with every other op on total_var.
    const std::int64_t now = co_await ordo::asio::push(engine, ordo::reads(), ordo::writes(total_var),
                                                       [&total, x] { return total += x; }, asio::use_awaitable);
    co_await asio::async_write(socket, asio::buffer(&now, sizeof now), asio::use_awaitable);
  }
  co_await ordo::asio::wait_for(engine, total_var, asio::use_awaitable);
}

asio::awaitable<void> client(tcp::endpoint at, std::array<std::int64_t, 3>& replies) {
  tcp::socket socket(co_await asio::this_coro::executor);
  co_await socket.async_connect(at, asio::use_awaitable);
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const std::int64_t x = static_cast<std::int64_t>(i) + 1;
    co_await asio::async_write(socket, asio::buffer(&x, sizeof x), asio::use_awaitable);
    co_await asio::async_read(socket, asio::buffer(&replies[i], sizeof replies[i]), asio::use_awaitable);
  }
}

}  // namespace

int main() {
  ordo::Engine engine;
  ordo::Var total_var = engine.new_variable();
  std::int64_t total = 0;
  std::array<std::int64_t, 3> replies{};
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  int failures = 0;
  auto on_done = [&failures](std::exception_ptr e) {
    if (e) ++failures;
  };
  asio::co_spawn(io, serve(acceptor, engine, total_var, total, static_cast<int>(replies.size())), on_done);
  asio::co_spawn(io, client(acceptor.local_endpoint(), replies), on_done);
  io.run();
  engine.wait_for_all();
  std::printf("consumer_asio: replies %lld %lld %lld, total %lld\n", static_cast<long long>(replies[0]),
              static_cast<long long>(replies[1]), static_cast<long long>(replies[2]), static_cast<long long>(total));
  return failures == 0 && replies == std::array<std::int64_t, 3>{1, 3, 6} && total == 6 ? 0 : 1;
}
