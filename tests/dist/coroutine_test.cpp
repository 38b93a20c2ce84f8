// tests/dist/coroutine_test.cpp - a coroutine awaits remote data as it
// awaits local data: Dist::push is a plain call on every rank, and the
// local variable of a DistVar orders the transfer that brings its value, so
// co_await engine.wait_for(v.local()) resumes once it has landed (and
// rethrows a failure that came with it).
#include <stdexcept>

#include "dist_test_util.hpp"
#include "ordo/coro.hpp"
#include "ordo/task.hpp"

namespace ordo::dist::test {
namespace {

Task<std::uint64_t> read_when_here(Engine& engine, DistVar v, const std::uint64_t& value) {
  co_await engine.wait_for(v.local());
  co_return value;
}

TEST(DistCoroutine, AwaitsRemoteDataLikeLocalData) {
  Engine engine(engine_options());
  Dist d(engine);
  const int reader = d.size() - 1;
  std::uint64_t a = 0, b = 0, c = 0;
  const DistVar va = d.register_value(a, 0);
  const DistVar vb = d.register_value(b, reader);
  const DistVar vc = d.register_value(c, 0);
  d.push([&] { a = 31; }, {}, {va});
  d.push([&] { b = a + 1; }, {va}, {vb});  // on `reader`: a comes from rank 0
  d.push([] { throw std::runtime_error("far away"); }, {}, {vc});
  d.push([&] { b += c; }, {vc}, {vb});  // skipped on `reader`: c arrives as an error
  if (d.rank() == reader) {
    // Here, a's copy was written by a receive: awaiting it waits for the transfer.
    EXPECT_EQ(sync_wait(read_when_here(engine, va, a)), 31u);
    if (reader != 0) {
      EXPECT_THROW(sync_wait(read_when_here(engine, vc, c)), RemoteError);
    }
    EXPECT_THROW(d.wait_for_var(vb), std::exception);
    EXPECT_EQ(b, 32u);
  }
  if (d.rank() == 0) {
    EXPECT_THROW(d.wait_for_var(vc), std::runtime_error);
  }
  if (d.rank() == reader && reader != 0) {
    EXPECT_THROW(d.wait_for_var(vc), RemoteError);  // this rank's copy: cleared by observing it
  }
  EXPECT_NO_THROW(d.wait_for_all());
}

}  // namespace
}  // namespace ordo::dist::test
