// A program outside the ordo tree, built against an installed ordo
// (target ordo::io): a coroutine writes a file and reads it back through the
// reactor, then an engine op reads the buffer after push_read filled it.
// argv[1]: a scratch directory.
#include <ordo/coro.hpp>
#include <ordo/io.hpp>
#include <ordo/ordo.hpp>
#include <ordo/task.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <span>
#include <string>

namespace {

ordo::Task<std::string> round_trip(ordo::io::Reactor& io, std::string path, std::string text) {
  const int fd = co_await io.open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  co_await io.write(fd, std::as_bytes(std::span(text)), 0).exact();
  std::string back(text.size(), '\0');
  co_await io.read(fd, std::as_writable_bytes(std::span(back)), 0).exact();
  co_await io.close(fd);
  co_return back;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = std::string(argc > 1 ? argv[1] : ".") + "/consumer_io.txt";
  const std::string text = "ordo::io from an installed package";
  ordo::Engine engine;
  ordo::io::Reactor io(engine);
  const std::string back = ordo::sync_wait(round_trip(io, path, text));

  // The engine-aware form: a read op, then an op that sees its data.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  std::string buf(text.size(), '\0');
  std::string seen;
  ordo::Var buf_var = engine.new_variable();
  io.push_read(buf_var, fd, std::as_writable_bytes(std::span(buf)), 0);
  engine.push_sync([&] { seen = buf; }, ordo::Context::cpu(), {buf_var}, {});
  engine.wait_for_all();
  ::close(fd);
  std::printf("consumer_io: backend %s: '%s'\n", io.backend() == ordo::io::Backend::uring ? "io_uring" : "threads",
              back.c_str());
  return back == text && seen == text ? 0 : 1;
}
