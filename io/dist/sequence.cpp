// io/dist/sequence.cpp - the verdict when the ranks' sequences of pushes
// differ (sequence.hpp).
#include "sequence.hpp"

#include <algorithm>
#include <optional>
#include <vector>

namespace ordo::dist::detail {

namespace {

/// A rank's state at push #n: its record there, none (it made fewer
/// pushes), or unknown (older than its ring).
struct At {
  enum Kind { kKnown, kNone, kUnknown } kind = kUnknown;
  const PushRecord* record = nullptr;
};

At at(const SequenceSummary& s, std::uint64_t n) {
  if (n > s.pushes) return {At::kNone, nullptr};
  const PushRecord& r = s.recent[n % Sequence::kRecent];
  if (r.push == n) return {At::kKnown, &r};
  return {};
}

bool same(const At& a, const At& b) {
  if (a.kind != b.kind) return false;
  return a.kind != At::kKnown || a.record->hash == b.record->hash;
}

/// The hash after push #n, if `s` knows it.
std::optional<std::uint64_t> hash_at(const SequenceSummary& s, std::uint64_t n) {
  if (n == 0) return std::uint64_t{0};
  const At a = at(s, n);
  if (a.kind != At::kKnown) return std::nullopt;
  return a.record->hash;
}

std::string list(const std::vector<int>& ranks, std::span<const int> names) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const int r = names.empty() ? ranks[i] : names[std::size_t(ranks[i])];
    s += (i != 0 ? ", " : "") + std::to_string(r);
  }
  return s;
}

std::string describe(const At& a, std::uint64_t n) {
  switch (a.kind) {
    case At::kNone:
      return "no push #" + std::to_string(n);
    case At::kUnknown:
      return "a push not kept";
    case At::kKnown:
      break;
  }
  const PushRecord& r = *a.record;
  const std::string exec = " that runs on rank " + std::to_string(r.how >> 2);
  switch (r.how & 3) {
    case PushRecord::kWritten:
      return "an op writing variable " + std::to_string(r.var) + exec;
    case PushRecord::kRead:
      return "an op reading variable " + std::to_string(r.var) + " (and writing none)" + exec;
    default:
      return "an op on no variable" + exec;
  }
}

}  // namespace

Divergence diagnose(std::span<const SequenceSummary> ranks, std::uint64_t verified, std::span<const int> names) {
  // The ranks grouped by where they ended up, rank 0's group first.
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < int(ranks.size()); ++r) {
    const SequenceSummary& s = ranks[std::size_t(r)];
    auto g = std::find_if(groups.begin(), groups.end(), [&](const std::vector<int>& m) {
      const SequenceSummary& o = ranks[std::size_t(m.front())];
      return o.pushes == s.pushes && o.hash == s.hash;
    });
    if (g == groups.end()) {
      groups.push_back({r});
    } else {
      g->push_back(r);
    }
  }
  Divergence d;
  d.rank = groups.size() > 1 ? groups[1].front() : 0;
  if (!names.empty()) d.rank = names[std::size_t(d.rank)];

  // The hash after push #n names the whole prefix: the ranks agree up to
  // the last n where every rank's hash is known and equal, and differ from
  // the first n where the known states differ. In between (pushes older
  // than some rank's ring) the first difference is not pinned.
  std::uint64_t agreed = verified, differs = 0;
  std::uint64_t last = 0;
  for (const SequenceSummary& s : ranks) last = std::max(last, s.pushes);
  for (std::uint64_t n = verified + 1; n <= last && differs == 0; ++n) {
    std::optional<At> first;
    bool unknown = false, differ = false;
    for (const SequenceSummary& s : ranks) {
      const At a = at(s, n);
      if (a.kind == At::kUnknown) {
        unknown = true;
        continue;
      }
      if (!first) {
        first = a;
      } else if (!same(*first, a)) {
        differ = true;
      }
    }
    if (differ) {
      differs = n;
    } else if (!unknown) {
      agreed = n;
    }
  }
  if (differs == 0) differs = last;  // the final hashes differ; only a collision of the ring's hashes gets here
  d.push = agreed + 1;

  std::string& w = d.what;
  w = "ordo::dist: the ranks pushed different sequences of ops: ";
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const SequenceSummary& s = ranks[std::size_t(groups[i].front())];
    w += (i != 0 ? ", " : "") + list(groups[i], names) + " made " + std::to_string(s.pushes) + " pushes";
    if (i != 0 && s.pushes == ranks[0].pushes) w += " (a different sequence)";
  }
  if (agreed + 1 == differs) {
    w += "; they first differ at push #" + std::to_string(differs);
  } else {
    w += "; they agree up to push #" + std::to_string(agreed) + " and first differ in pushes #" +
         std::to_string(agreed + 1) + " to #" + std::to_string(differs) + " (older pushes are not kept); at push #" +
         std::to_string(differs);
  }
  w += ", where ";
  for (std::size_t i = 0; i < groups.size(); ++i) {
    w += (i != 0 ? "; " : "") + list(groups[i], names) + ": " + describe(at(ranks[std::size_t(groups[i].front())], differs), differs);
  }
  w += ". The ranks' books differ from there on, so every wait of this Dist fails";
  return d;
}

bool diverged_before_check(const SequenceSummary& mine, const SequenceSummary& peer) {
  if (peer.pushes < mine.pushes) return true;
  const std::optional<std::uint64_t> theirs = hash_at(peer, mine.pushes);
  return theirs && *theirs != mine.hash;
}

}  // namespace ordo::dist::detail
