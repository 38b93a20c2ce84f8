// tests/dist/main.cpp - GoogleTest under MPI: every rank runs every test (the
// same program). Rank 0 prints as usual; the others print only their
// failures, prefixed with their rank. A failure on any rank makes that
// process, and so mpirun, exit non-zero.
#include <cstdio>

#include <gtest/gtest.h>

#include "ordo/dist.hpp"

namespace {
class FailuresOnly : public ::testing::EmptyTestEventListener {
 public:
  explicit FailuresOnly(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::printf("[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                r.summary());
    std::fflush(stdout);
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  ordo::dist::Mpi mpi(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (const int rank = ordo::dist::Mpi::world_rank(); rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailuresOnly(rank));
  }
  return RUN_ALL_TESTS();
}
