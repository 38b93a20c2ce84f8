// OpFn's move: a captured graph moves its bodies into one array
// (GraphData::fns), so a moved body must run as before, be destroyed once,
// and leave its source empty, whether it lived inline or on the heap.
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ordo/detail/op_fn.hpp"

namespace {

using ordo::RunContext;
using ordo::detail::OpFn;

RunContext cpu_rc() { return RunContext{ordo::Context::cpu(), nullptr, 0}; }

TEST(OpFn, AMovedInlineBodyRunsOnceAndIsDestroyedOnce) {
  auto alive = std::make_shared<int>(0);  // use_count: 1 + the bodies holding it
  std::string seen;
  {
    OpFn a;
    a.emplace([alive, &seen, tag = std::string("inline")](const RunContext&) { seen += tag; });
    ASSERT_EQ(alive.use_count(), 2);
    const void* type = a.type();
    OpFn b(std::move(a));
    EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): a moved-from body is empty
    EXPECT_EQ(b.type(), type);
    EXPECT_EQ(alive.use_count(), 2);  // moved, not copied; the source's copy ended
    b.invoke_sync(cpu_rc());
    EXPECT_EQ(seen, "inline");
  }
  EXPECT_EQ(alive.use_count(), 1);
}

TEST(OpFn, AMovedHeapBodyKeepsItsAllocation) {
  auto alive = std::make_shared<int>(0);
  std::array<char, 2 * OpFn::kInlineSize> big{};  // too large to live inline
  int calls = 0;
  {
    OpFn a;
    a.emplace([alive, big, &calls](const RunContext&) { calls += 1 + big[0]; });
    OpFn b(std::move(a));
    EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move)
    b.invoke_sync(cpu_rc());
    EXPECT_EQ(alive.use_count(), 2);
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(alive.use_count(), 1);
}

TEST(OpFn, ABodyWhoseMoveMayThrowLivesOnTheHeapAndMovesByPointer) {
  struct ThrowingMove {
    int* calls;
    int* moves;
    ThrowingMove(int* c, int* m) : calls(c), moves(m) {}
    ThrowingMove(const ThrowingMove&) = default;
    ThrowingMove(ThrowingMove&& o) noexcept(false) : calls(o.calls), moves(o.moves) { ++*moves; }
    void operator()(const RunContext&) const { ++*calls; }
  };
  int calls = 0;
  int moves = 0;
  OpFn a;
  a.emplace(ThrowingMove(&calls, &moves));
  EXPECT_EQ(moves, 1);   // into its heap allocation
  OpFn b(std::move(a));  // noexcept: the body is not moved, only its pointer
  EXPECT_EQ(moves, 1) << "a body whose move may throw was moved by OpFn's move";
  b.invoke_sync(cpu_rc());
  EXPECT_EQ(calls, 1);
}

TEST(OpFn, BodiesMovedIntoAVectorAsItGrowsStillRunInOrder) {
  std::vector<int> order;
  std::vector<OpFn> fns;
  for (int i = 0; i < 100; ++i) {
    OpFn f;
    f.emplace([&order, s = std::to_string(i)](const RunContext&) { order.push_back(std::stoi(s)); });
    fns.emplace_back(std::move(f));  // the vector's growth moves the earlier ones too
  }
  for (OpFn& f : fns) f.invoke_sync(cpu_rc());
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST(OpFn, AnEmptyBodyMovesToAnEmptyOne) {
  OpFn a;
  OpFn b(std::move(a));
  EXPECT_TRUE(b.empty());
}

}  // namespace
