// src/profiler/critical_path.cpp - the critical path of a profile: walked
// back from the work that finished last, each step to what it waited for.
#include "critical_path.hpp"

#include <algorithm>
#include <unordered_map>

namespace ordo::detail {

namespace {

bool finished_op(const OpProfile& p) {
  return p.status != ProfiledStatus::unfinished && p.start_ns >= 0 && p.end_ns >= 0;
}

/// A node: an op (slice == false) or a slice, by its index in d.ops / d.slices.
struct Node {
  bool slice = false;
  std::size_t index = 0;
};

}  // namespace

CriticalPath critical_path(const ProfileData& d) {
  CriticalPath cp;
  auto begin_of = [&](Node n) {
    if (n.slice) return d.slices[n.index].begin_ns;
    const OpProfile& p = d.ops[n.index];
    return p.kind == ProfiledKind::wait_for_var ? p.push_ns : p.start_ns;
  };
  auto end_of = [&](Node n) { return n.slice ? d.slices[n.index].end_ns : d.ops[n.index].end_ns; };

  // What each op waited for last: the op whose completion made it ready
  // (its released edge), else the slice whose delivery finished it (an
  // async op) or pushed it (a resumption, a callback); GPU work its fence
  // held it for. A wait_for_all is not work: it is neither a step nor an end.
  std::vector<std::int64_t> ready_by(d.ops.size(), -1);  // op index
  std::vector<std::int64_t> finished_by(d.ops.size(), -1), pushed_by(d.ops.size(), -1);  // slice index
  std::vector<std::int64_t> held_by(d.ops.size(), -1);  // slice index: the held op's last fence
  // GPU work: the work its stream waited for or ran just before, last to end (slice index).
  std::vector<std::int64_t> after(d.slices.size(), -1);
  // Of two slices (indices, -1: none), the finished one that ended last.
  auto later = [&](std::int64_t a, std::int64_t b) {
    if (b < 0 || d.slices[static_cast<std::size_t>(b)].end_ns < 0) return a;
    if (a < 0 || d.slices[static_cast<std::size_t>(a)].end_ns < d.slices[static_cast<std::size_t>(b)].end_ns) return b;
    return a;
  };
  for (const DependencyEdge& e : d.edges) {
    if (e.released) ready_by[e.to - 1] = static_cast<std::int64_t>(e.from - 1);
  }
  for (const SliceRelease& r : d.slice_releases) {
    const auto s = static_cast<std::int64_t>(r.slice - 1);
    if (r.fence) {
      held_by[r.op - 1] = later(held_by[r.op - 1], s);
    } else {
      (r.at_end ? finished_by : pushed_by)[r.op - 1] = s;
    }
  }
  for (const SliceWait& w : d.slice_waits) {
    after[w.after - 1] = later(after[w.after - 1], static_cast<std::int64_t>(w.before - 1));
  }

  Node last{};
  bool found = false;
  std::int64_t first = -1;
  for (std::size_t i = 0; i < d.ops.size(); ++i) {
    const OpProfile& p = d.ops[i];
    if (p.push_ns >= 0 && (first < 0 || p.push_ns < first)) first = p.push_ns;
    if (!finished_op(p) || p.kind == ProfiledKind::wait_for_all) continue;
    if (!found || p.end_ns > end_of(last)) last = Node{false, i}, found = true;
  }
  for (std::size_t i = 0; i < d.slices.size(); ++i) {
    const SliceProfile& s = d.slices[i];
    if (s.begin_ns >= 0 && (first < 0 || s.begin_ns < first)) first = s.begin_ns;
    if (s.end_ns < 0) continue;
    if (!found || s.end_ns > end_of(last)) last = Node{true, i}, found = true;
  }
  if (!found) return cp;
  cp.wall_ns = end_of(last) - first;

  // An op's predecessor: the request that finished it (an async op waits
  // for that last), else the op that made it ready, else the request that
  // pushed it; `after_body`: its own request is already on the chain (a
  // push_read: the op began the request that finished it), so what made it
  // ready comes next.
  auto op_pred = [&](std::size_t i, bool after_body, Node& out) {
    if (!after_body && finished_by[i] >= 0 && d.slices[static_cast<std::size_t>(finished_by[i])].end_ns >= 0) {
      out = Node{true, static_cast<std::size_t>(finished_by[i])};
      return true;
    }
    const bool ready = ready_by[i] >= 0 && finished_op(d.ops[static_cast<std::size_t>(ready_by[i])]);
    // Ready, then held by a fence: whichever ended last bounded it.
    if (held_by[i] >= 0 && (!ready || d.slices[static_cast<std::size_t>(held_by[i])].end_ns >=
                                          d.ops[static_cast<std::size_t>(ready_by[i])].end_ns)) {
      out = Node{true, static_cast<std::size_t>(held_by[i])};
      return true;
    }
    if (ready) {
      out = Node{false, static_cast<std::size_t>(ready_by[i])};
      return true;
    }
    if (pushed_by[i] >= 0 && d.slices[static_cast<std::size_t>(pushed_by[i])].end_ns >= 0) {
      out = Node{true, static_cast<std::size_t>(pushed_by[i])};
      return true;
    }
    return false;
  };
  std::vector<Node> chain{last};
  for (;;) {
    const Node n = chain.back();
    Node p{};
    bool more = false;
    if (!n.slice) {
      more = op_pred(n.index, false, p);
    } else {
      if (const std::uint64_t by = d.slices[n.index].launched_by; by != 0) {
        const bool own = chain.size() >= 2 && !chain[chain.size() - 2].slice && chain[chain.size() - 2].index == by - 1;
        if (own) {
          more = op_pred(by - 1, true, p);  // the async op it finishes: what made that op ready
        } else if (finished_op(d.ops[by - 1])) {
          p = Node{false, by - 1};
          more = true;
        }
      }
      // GPU work began once it was enqueued and the work before it ended.
      if (const std::int64_t a = after[n.index]; a >= 0 && (!more || d.slices[static_cast<std::size_t>(a)].end_ns >= end_of(p))) {
        p = Node{true, static_cast<std::size_t>(a)};
        more = true;
      }
    }
    // Dependencies point back in time, so the walk ends; a step met twice
    // (clocks of two threads a read apart) ends it too.
    if (!more || std::any_of(chain.begin(), chain.end(), [&](Node c) { return c.slice == p.slice && c.index == p.index; })) {
      break;
    }
    chain.push_back(p);
  }
  std::reverse(chain.begin(), chain.end());

  std::int64_t covered_to = -1;
  for (const Node n : chain) {
    CriticalStep st;
    if (n.slice) {
      const SliceProfile& s = d.slices[n.index];
      st = CriticalStep{s.category, s.name, s.id, s.begin_ns, s.end_ns};
    } else {
      const OpProfile& p = d.ops[n.index];
      st = CriticalStep{"op", p.name.empty() ? "(unnamed)" : p.name, p.id, begin_of(n), p.end_ns};
    }
    cp.length_ns += std::max<std::int64_t>(0, st.end_ns - std::max(st.begin_ns, covered_to));
    covered_to = std::max(covered_to, st.end_ns);
    cp.steps.push_back(std::move(st));
  }
  cp.top = cp.steps;
  std::stable_sort(cp.top.begin(), cp.top.end(), [](const CriticalStep& a, const CriticalStep& b) {
    return a.end_ns - a.begin_ns > b.end_ns - b.begin_ns;
  });
  if (cp.top.size() > 5) cp.top.resize(5);
  return cp;
}

}  // namespace ordo::detail
