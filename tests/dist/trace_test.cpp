// tests/dist/trace_test.cpp - ordo::dist's transfers in the profiler's trace:
// each send and receive a slice on its rank's "ordo transfers" process
// (peer, variable, bytes), the traces of all ranks joined by
// scripts/merge_traces.py into one with an arrow per transfer, read back
// with the strict JSON parser.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <span>
#include <tuple>
#include <vector>

#include "dist_test_util.hpp"
#include "profiler/json.hpp"

namespace ordo::dist::test {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Rank 0 owns `a`; every other rank reads it (one transfer each) and writes
// its own `b[r]`, which rank 0 then reads back (one more each).
TEST(DistTrace, TransfersAreSlicesJoinedAcrossRanksByTheMergeScript) {
  ordo::Options o = engine_options();
  o.profile.enabled = true;
  Engine engine(o);
  Dist d(engine, {.cache = false});
  const int n = d.size();
  std::uint64_t a = d.rank() == 0 ? 7 : 0;
  std::vector<std::uint64_t> b(static_cast<std::size_t>(n), 0);
  std::uint64_t sum = 0;
  const DistVar va = d.register_value(a, 0);
  std::vector<DistVar> vb;
  for (int r = 0; r < n; ++r) vb.push_back(d.register_value(b[std::size_t(r)], r));
  const DistVar vsum = d.register_value(sum, 0);
  for (int r = 1; r < n; ++r) d.push([&, r] { b[std::size_t(r)] = a + std::uint64_t(r); }, {va}, {vb[std::size_t(r)]});
  const std::vector<DistVar> others(vb.begin() + 1, vb.end());
  d.push([&] {
    for (int r = 1; r < n; ++r) sum += b[std::size_t(r)];
  }, std::span<const DistVar>(others), {vsum});
  d.wait_for_all();
  if (d.rank() == 0) EXPECT_EQ(sum, 7u * std::uint64_t(n - 1) + std::uint64_t(n * (n - 1) / 2));

  // This rank's own trace: its transfers, each launched by the op that made it.
  const ProfileData data = engine.profiler().data();
  int sends = 0, recvs = 0;
  for (const SliceProfile& s : data.slices) {
    ASSERT_EQ(s.category, "transfer");
    EXPECT_EQ(s.track, "rank " + std::to_string(d.rank()));
    EXPECT_GE(s.end_ns, s.begin_ns);
    EXPECT_NE(s.launched_by, 0u) << s.name;
    EXPECT_EQ(s.bytes, sizeof(std::uint64_t));
    EXPECT_NE(s.peer, d.rank());
    (s.name == "send" ? sends : recvs) += 1;
  }
  // Rank 0 sends a to every other rank and receives every b back.
  EXPECT_EQ(sends, d.rank() == 0 ? n - 1 : 1);
  EXPECT_EQ(recvs, d.rank() == 0 ? n - 1 : 1);
  // Each receive's completion finished its receive op.
  EXPECT_EQ(data.slice_releases.size(), static_cast<std::size_t>(recvs));

  // One file per rank in a directory the ranks share (their parent: mpirun).
  const fs::path dir = fs::temp_directory_path() / ("ordo-dist-trace-" + std::to_string(::getppid()));
  fs::create_directories(dir);
  engine.profiler().write_chrome_trace((dir / ("trace.rank" + std::to_string(d.rank()) + ".json")).string());
  d.barrier();
  // Rank 0 checks the merged trace; in a lambda, so that a failed ASSERT
  // still reaches the last barrier (the other ranks wait there).
  const auto check_merged = [&] {
    std::string cmd = "python3 " ORDO_SOURCE_DIR "/scripts/merge_traces.py " + (dir / "merged.json").string();
    for (int r = 0; r < n; ++r) cmd += " " + (dir / ("trace.rank" + std::to_string(r) + ".json")).string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const json::Value doc = json::parse(read_file(dir / "merged.json"));
    EXPECT_EQ(doc["otherData"]["ranks"].number(), n);
    EXPECT_EQ(doc["otherData"]["transfers"].number(), 2 * (n - 1));
    EXPECT_EQ(doc["otherData"]["unmatched_transfer_slices"].number(), 0);
    const json::Array& events = doc["traceEvents"].array();
    // Every transfer arrow starts inside a send slice of its source rank and
    // ends inside the receive slice of its destination, for the same variable.
    std::map<double, std::pair<const json::Value*, const json::Value*>> flows;
    for (const json::Value& ev : events) {
      if (ev["ph"].string() == "s" && ev["cat"].string() == "transfer") flows[ev["id"].number()].first = &ev;
      if (ev["ph"].string() == "f" && ev["cat"].string() == "transfer") flows[ev["id"].number()].second = &ev;
    }
    ASSERT_EQ(flows.size(), static_cast<std::size_t>(2 * (n - 1)));
    auto inside = [&](const json::Value& at, const std::string& name) -> const json::Value* {
      for (const json::Value& ev : events) {
        if (ev["ph"].string() != "X" || ev["name"].string() != name || ev["pid"].number() != at["pid"].number() ||
            ev["tid"].number() != at["tid"].number()) {
          continue;
        }
        const double t = at["ts"].number(), b0 = ev["ts"].number(), b1 = b0 + ev["dur"].number();
        if (t + 1e-6 >= b0 && t <= b1 + 1e-6) return &ev;
      }
      return nullptr;
    };
    std::map<std::pair<int, int>, int> pairs;
    for (const auto& [id, fl] : flows) {
      ASSERT_NE(fl.first, nullptr);
      ASSERT_NE(fl.second, nullptr);
      const json::Value* send = inside(*fl.first, "send");
      const json::Value* recv = inside(*fl.second, "recv");
      ASSERT_NE(send, nullptr) << "flow " << id;
      ASSERT_NE(recv, nullptr) << "flow " << id;
      const json::Value& args = (*fl.first)["args"];
      EXPECT_EQ((*send)["args"]["var"].number(), (*recv)["args"]["var"].number());
      EXPECT_EQ((*send)["args"]["peer"].number(), args["to_rank"].number());
      EXPECT_EQ((*recv)["args"]["peer"].number(), args["from_rank"].number());
      // The processes of both ends are named after their ranks.
      EXPECT_EQ(static_cast<int>((*send)["pid"].number()) / 100 - 1, static_cast<int>(args["from_rank"].number()));
      EXPECT_EQ(static_cast<int>((*recv)["pid"].number()) / 100 - 1, static_cast<int>(args["to_rank"].number()));
      ++pairs[{static_cast<int>(args["from_rank"].number()), static_cast<int>(args["to_rank"].number())}];
    }
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ((pairs[{0, r}]), 1) << "0 -> " << r;
      EXPECT_EQ((pairs[{r, 0}]), 1) << r << " -> 0";
    }
  };
  if (d.rank() == 0) {
    check_merged();
    fs::remove_all(dir);
  }
  d.barrier();
}

}  // namespace
}  // namespace ordo::dist::test
