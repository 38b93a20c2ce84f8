// Engine::stats() with ordo::io: requests per kind, started and in flight,
// and the backend's name, on every backend of this build.
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <string>

#include <gtest/gtest.h>

#include "core/test_util.hpp"
#include "io/io_test_util.hpp"
#include "ordo/io.hpp"

namespace ordo::io {
namespace {

const IoKindStats* find_kind(const EngineStats& s, const std::string& kind) {
  for (const IoKindStats& k : s.io) {
    if (k.kind == kind) return &k;
  }
  return nullptr;
}

class IoStats : public ::testing::TestWithParam<Backend> {};

// A read of an empty pipe stays in flight until the pipe is written to; the
// snapshot sees it, then sees it delivered.
TEST_P(IoStats, ReadInFlightUntilDataComes) {
  Engine engine(Options{.cpu_workers = 2});
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  {
    Reactor io(engine, IoOptions{.backend = GetParam(), .log = [](std::string_view) {}});
    const EngineStats before = engine.stats();
    EXPECT_EQ(before.io_backend, GetParam() == Backend::threads ? "threads" : "io_uring");
    EXPECT_EQ(find_kind(before, "read"), nullptr);

    std::array<std::byte, 4> buf{};
    ordo::test::Counter delivered;
    io.read(p[0], buf, Reactor::kCurrent).then([&](Result r) {
      EXPECT_EQ(r.value(), 3U);
      delivered.arrive();
    });
    const EngineStats during = engine.stats();
    const IoKindStats* read = find_kind(during, "read");
    ASSERT_NE(read, nullptr);
    EXPECT_EQ(read->submitted, 1U);
    EXPECT_EQ(read->in_flight, 1U);

    ASSERT_EQ(::write(p[1], "abc", 3), 3);
    ASSERT_TRUE(delivered.wait_for(1));
    engine.wait_for_all();
    const EngineStats after = engine.stats();
    read = find_kind(after, "read");
    ASSERT_NE(read, nullptr);
    EXPECT_EQ(read->submitted, 1U);
    EXPECT_EQ(read->in_flight, 0U);
  }
  // The reactor is gone: its rows with it.
  EXPECT_EQ(engine.stats().io_backend, "");
  EXPECT_TRUE(engine.stats().io.empty());
  ::close(p[0]);
  ::close(p[1]);
}

INSTANTIATE_TEST_SUITE_P(Backends, IoStats, ::testing::ValuesIn(backends()), backend_name);

}  // namespace
}  // namespace ordo::io
