// io/dist/sequence.hpp - what a rank knows of its own sequence of pushes, so
// that ranks whose programs pushed different sequences find out (docs/dist.md,
// "Ranks that push different sequences").
//
// Every rank folds each push (its variables' ids and access modes, and the
// rank it runs on) into a running hash; the hash after push #n names the
// whole sequence up to n. Transfers carry the hash of the push that made
// them, and every collective wait compares the ranks' counts and hashes. On a
// mismatch the ranks exchange their last kRecent pushes to say where the
// sequences first differ.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace ordo::dist::detail {

/// One push, as the ring of recent pushes keeps it.
struct PushRecord {
  std::uint64_t push = 0;  ///< its number (1-based); 0: an empty slot
  std::uint64_t hash = 0;  ///< the running hash after it
  std::uint64_t var = 0;   ///< the id of its first written variable, else of its first read one
  std::uint64_t how = 0;   ///< kWritten or kRead (or 0: no variable), | the executing rank << 2
  static constexpr std::uint64_t kWritten = 1, kRead = 2;
};

/// The pushing thread's record of its pushes. Plain fields: only the thread
/// that pushes (one at a time, the Dist's contract) reads or writes them.
struct Sequence {
  /// Enough to name the first difference when the ranks part within the
  /// last few pushes before a wait (a rank that skips or swaps a push); a
  /// difference older than that is bounded, not pinned (see diagnose).
  static constexpr std::size_t kRecent = 64;

  std::uint64_t pushes = 0;    ///< pushes begun on this rank
  std::uint64_t hash = 0;      ///< the running hash over them
  std::uint64_t verified = 0;  ///< pushes at the last collective check, which every rank passed
  std::array<PushRecord, kRecent> recent{};

  /// Folds one word into the running hash: order-sensitive, a rotate, a xor
  /// and a multiply (the push path's whole cost of this check).
  static constexpr std::uint64_t step(std::uint64_t h, std::uint64_t word) noexcept {
    return ((h << 5 | h >> 59) ^ word) * 0x9e3779b97f4a7c15ULL;
  }
  static constexpr std::uint64_t read_word(std::uint64_t id) noexcept { return id << 1; }
  static constexpr std::uint64_t write_word(std::uint64_t id) noexcept { return id << 1 | 1; }
  /// Closes push #pushes, whose variables' words are already folded in `h`:
  /// its shape (list sizes, executor) keeps {a}{b} apart from {a, b}.
  void close(std::uint64_t h, std::size_t reads, std::size_t writes, int exec, std::uint64_t first_var,
             std::uint64_t first_how) noexcept {
    hash = step(h, ~(std::uint64_t(unsigned(exec)) << 40 ^ std::uint64_t(reads) << 20 ^ std::uint64_t(writes)));
    recent[pushes % kRecent] = {pushes, hash, first_var, first_how | std::uint64_t(unsigned(exec)) << 2};
  }
};

/// What one rank contributes when a collective check finds a mismatch.
struct SequenceSummary {
  std::uint64_t pushes = 0;
  std::uint64_t hash = 0;
  std::array<PushRecord, Sequence::kRecent> recent{};
};

/// The verdict on the ranks' summaries (index = rank, or `names[index]`
/// when given): the same text on every rank, the lowest rank whose sequence
/// differs from the first one's, and the push where the sequences first may
/// differ. `verified`: pushes at the last check every rank passed (they
/// agree up to there).
struct Divergence {
  std::string what;
  int rank = 0;
  std::uint64_t push = 0;
};
Divergence diagnose(std::span<const SequenceSummary> ranks, std::uint64_t verified, std::span<const int> names = {});

/// Whether a peer that entered a collective check with `peer`'s pushes
/// proves this rank's books (`mine`, which has not entered that check yet)
/// diverged from its: it reached the check with fewer pushes than this rank
/// has made already (so it never makes the transfers of the rest), or its
/// hash differs from this rank's at a push both rings still know. A peer
/// further on whose ring no longer reaches this rank's last push proves
/// nothing.
bool diverged_before_check(const SequenceSummary& mine, const SequenceSummary& peer);

}  // namespace ordo::dist::detail
