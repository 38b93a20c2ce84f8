// The profiler (ordo/profiler.hpp): the Chrome trace read back with a strict
// JSON parser, the DOT graph of a known dependency graph, the summary, the
// memory bound, the options and the misuse errors, on every engine kind.
#include <future>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "coro/coro_test_util.hpp"
#include "ordo/profiler.hpp"
#include "profiler/json.hpp"

namespace ordo::test {
namespace {

Options profiled(EngineKind kind, unsigned workers = 3) {
  Options o;
  o.kind = kind;
  o.cpu_workers = workers;
  o.profile.enabled = true;
  return o;
}

class ProfilerKinds : public ::testing::TestWithParam<EngineKind> {};

std::string kind_name(const ::testing::TestParamInfo<EngineKind>& info) { return std::string(to_string(info.param)); }

/// The ops of run_mixed(), by name: how many of each.
const std::map<std::string, int> kMixedOps = {
    {"load", 1},  {"twice", 1},   {"plus", 1},         {"sum", 1},          {"fetch", 1},
    {"after_fetch", 1}, {"boom", 1}, {"skip_me", 1},   {"op_inc", 2},       {"posted", 1},
    {"coro_fn", 1}, {"coro_lease", 1}, {"wait_for_var", 3}, {"delete_variable", 1}, {"wait_for_all", 1},
};

/// A small run with every kind of op: sync ops in a diamond, an async op
/// completed from another thread after its dependant was pushed, a failing
/// op and the op it makes skip, a pre-built operator pushed twice, a post,
/// both coroutine push forms, wait_for_var, delete_variable, wait_for_all.
void run_mixed(Engine& engine) {
  const Context cpu = Context::cpu();
  Var a = engine.new_variable(), b = engine.new_variable(), c = engine.new_variable(), d = engine.new_variable(),
      e = engine.new_variable(), f = engine.new_variable(), g = engine.new_variable(), h = engine.new_variable(),
      x = engine.new_variable();
  int va = 0, vb = 0, vc = 0, vd = 0;
  engine.push_sync([&] { va = 1; }, cpu, {}, {a}, {.name = "load"});
  engine.push_sync([&] { vb = 2 * va; }, cpu, {a}, {b}, {.name = "twice"});
  engine.push_sync([&] { vc = va + 1; }, cpu, {a}, {c}, {.name = "plus"});
  engine.push_sync([&] { vd = vb + vc; }, cpu, {b, c}, {d}, {.name = "sum"});

  // Completed by another thread once its dependant is queued behind it. The
  // body only hands its OnComplete over: once that is called the op is done
  // and wait_for_all may return, so the body must not touch this frame after.
  std::promise<OnComplete> fetch;
  engine.push_async([&](RunContext, OnComplete done) { fetch.set_value(std::move(done)); }, cpu, {}, {e},
                    {.name = "fetch"});
  engine.push_sync([] {}, cpu, {e}, {f}, {.name = "after_fetch"});
  std::thread completer([&fetch] { fetch.get_future().get()(); });

  engine.push_sync([] { throw std::runtime_error("boom!"); }, cpu, {}, {g}, {.name = "boom"});
  engine.push_sync([] {}, cpu, {g}, {h}, {.name = "skip_me"});

  Operator inc = engine.new_operator([&] { ++vd; }, {}, {d}, {.name = "op_inc"});
  engine.push(inc, cpu);
  engine.push(inc, cpu);
  engine.delete_operator(inc);

  engine.post([] {}, cpu, {.name = "posted"});

  auto task = [&]() -> Task<int> {
    const int twice_b = co_await engine.push(ordo::reads(b), ordo::writes(), [&] { return 2 * vb; }, cpu,
                                             OpAttrs{.name = "coro_fn"});
    {
      Lease lease = co_await ordo::push(engine, ordo::reads(d), ordo::writes(), cpu, OpAttrs{.name = "coro_lease"});
    }
    co_return twice_b;
  };
  EXPECT_EQ(run_bounded(task()), 4);

  engine.wait_for_var(d);
  engine.wait_for_var(f);
  EXPECT_THROW(engine.wait_for_var(h), std::runtime_error);  // boom!, through skip_me
  engine.delete_variable(x);
  engine.wait_for_all();
  completer.join();
  EXPECT_EQ(vd, 6);  // (2 + 2) + 2 increments
}

const json::Value* find_thread_name(const json::Array& events, double pid, double tid) {
  for (const json::Value& ev : events) {
    if (ev["ph"].string() == "M" && ev["name"].string() == "thread_name" && ev["pid"].number() == pid &&
        ev["tid"].number() == tid) {
      return &ev;
    }
  }
  return nullptr;
}

TEST_P(ProfilerKinds, TraceHasEveryOpOnceWithConsistentTimes) {
  Engine engine(profiled(GetParam()));
  run_mixed(engine);
  std::ostringstream out;
  engine.profiler().write_chrome_trace(out);
  const json::Value doc = json::parse(out.str());

  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc["displayTimeUnit"].string(), "ns");
  EXPECT_EQ(doc["otherData"]["dropped_events"].number(), 0);
  EXPECT_EQ(doc["otherData"]["unfinished_ops"].number(), 0);
  const json::Array& events = doc["traceEvents"].array();
  ASSERT_FALSE(events.empty());

  struct Op {
    std::string name, kind, status;
    double push, grant, start, end, ts, dur, pid, tid;
  };
  std::map<std::uint64_t, Op> ops;
  std::map<std::string, int> names;
  std::map<std::uint64_t, std::vector<const json::Value*>> flows;
  for (const json::Value& ev : events) {
    ASSERT_TRUE(ev.is_object());
    const std::string& ph = ev["ph"].string();
    ASSERT_TRUE(ev["pid"].is_number());
    ASSERT_TRUE(ev["name"].is_string());
    if (ph != "M") {
      ASSERT_TRUE(ev["ts"].is_number() && ev["ts"].number() >= 0) << ph;
    }
    if (ph == "s" || ph == "f") {
      flows[static_cast<std::uint64_t>(ev["id"].number())].push_back(&ev);
      continue;
    }
    if (ph != "X" || !ev["args"].has("id")) continue;
    const json::Value& args = ev["args"];
    const auto id = static_cast<std::uint64_t>(args["id"].number());
    ASSERT_EQ(ops.count(id), 0U) << "op " << id << " appears twice";
    ASSERT_GE(ev["dur"].number(), 0);
    ASSERT_NE(find_thread_name(events, ev["pid"].number(), ev["tid"].number()), nullptr)
        << "no thread_name for the track of op " << id;
    ops[id] = Op{ev["name"].string(),         args["kind"].string(),   args["status"].string(),
                 args["push_us"].number(),    args["grant_us"].number(), args["start_us"].number(),
                 args["end_us"].number(),     ev["ts"].number(),        ev["dur"].number(),
                 ev["pid"].number(),          ev["tid"].number()};
    ++names[ev["name"].string()];
  }
  EXPECT_EQ(names, kMixedOps);

  // Slices on one track nest properly (each one inside or after the one
  // before), as trace viewers require: body slices of async ops included.
  std::map<std::pair<double, double>, std::vector<std::pair<double, double>>> tracks;
  for (const json::Value& ev : events) {
    if (ev["ph"].string() != "X") continue;
    tracks[{ev["pid"].number(), ev["tid"].number()}].push_back({ev["ts"].number(), ev["ts"].number() + ev["dur"].number()});
  }
  for (auto& [track, slices] : tracks) {
    std::sort(slices.begin(), slices.end(), [](const auto& x, const auto& y) {
      return x.first != y.first ? x.first < y.first : x.second > y.second;
    });
    std::vector<double> open;  // ends of the enclosing slices
    for (const auto& [begin, end] : slices) {
      while (!open.empty() && open.back() <= begin + 1e-6) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(end, open.back() + 1e-6) << "overlapping slices on track " << track.first << "/" << track.second;
      }
      open.push_back(end);
    }
  }

  for (const auto& [id, op] : ops) {
    SCOPED_TRACE(op.name);
    EXPECT_LE(op.push, op.grant);
    EXPECT_LE(op.grant, op.start);
    EXPECT_LE(op.start, op.end);
    const double slice_start = op.kind == "wait_for_var" ? op.push : op.start;
    EXPECT_DOUBLE_EQ(op.ts, slice_start);
    EXPECT_NEAR(op.ts + op.dur, op.end, 1e-6);
    const std::string expected_status = op.name == "boom" ? "failed" : op.name == "skip_me" ? "skipped" : "ok";
    EXPECT_EQ(op.status, expected_status);
  }

  // Flows: one "s" and one "f" per id, each on the track of the op it binds
  // to, and the released op starts after the releasing one ended.
  EXPECT_FALSE(flows.empty());
  for (const auto& [id, pair] : flows) {
    ASSERT_EQ(pair.size(), 2U) << "flow " << id;
    const json::Value& s = *pair[0];
    const json::Value& f = *pair[1];
    ASSERT_EQ(s["ph"].string(), "s");
    ASSERT_EQ(f["ph"].string(), "f");
    EXPECT_EQ(f["bp"].string(), "e");
    EXPECT_EQ(s["cat"].string(), f["cat"].string());
    const Op& from = ops.at(static_cast<std::uint64_t>(s["args"]["from"].number()));
    const Op& to = ops.at(static_cast<std::uint64_t>(s["args"]["to"].number()));
    EXPECT_GE(to.start, from.end) << from.name << " -> " << to.name;
    EXPECT_EQ(s["pid"].number(), from.pid);
    EXPECT_EQ(s["tid"].number(), from.tid);
    EXPECT_EQ(f["pid"].number(), to.pid);
    EXPECT_EQ(f["tid"].number(), to.tid);
    EXPECT_TRUE(s["ts"].number() >= from.ts && s["ts"].number() <= from.ts + from.dur);
    EXPECT_TRUE(f["ts"].number() >= to.ts && f["ts"].number() <= to.ts + to.dur);
  }

  // The same from data(): every discovered dependency respects the order.
  const ProfileData data = engine.profiler().data();
  ASSERT_EQ(data.ops.size(), ops.size());
  bool fetch_released_after_fetch = false;
  for (const DependencyEdge& e : data.edges) {
    const OpProfile& from = data.ops.at(e.from - 1);
    const OpProfile& to = data.ops.at(e.to - 1);
    EXPECT_GE(to.start_ns, from.end_ns) << from.name << " -> " << to.name;
    if (from.name == "fetch" && to.name == "after_fetch" && e.released) fetch_released_after_fetch = true;
  }
  EXPECT_TRUE(fetch_released_after_fetch);
  int waits_rethrowing = 0;
  for (const OpProfile& p : data.ops) {
    SCOPED_TRACE(p.name);
    if (p.name == "fetch") {
      EXPECT_EQ(p.kind, ProfiledKind::async);
      EXPECT_GE(p.body_end_ns, p.start_ns);
    }
    if (p.name == "coro_fn" || p.name == "coro_lease") {
      EXPECT_EQ(p.kind, ProfiledKind::async);
    }
    if (p.name == "posted") {
      EXPECT_EQ(p.kind, ProfiledKind::post);
      EXPECT_TRUE(p.accesses.empty());
    }
    if (p.name == "boom" || p.name == "skip_me") {
      EXPECT_EQ(p.error, "boom!");
    }
    if (p.kind == ProfiledKind::wait_for_var) {
      EXPECT_EQ(p.status, ProfiledStatus::ok);  // a wait finishes; its caller rethrows
      waits_rethrowing += p.error == "boom!" ? 1 : 0;
    }
    if (p.name == "sum") {
      ASSERT_EQ(p.accesses.size(), 3U);
    }
  }
  EXPECT_EQ(waits_rethrowing, 1) << "wait_for_var(h) carries the error it rethrew";
}

TEST_P(ProfilerKinds, SummaryCountsPerName) {
  Engine engine(profiled(GetParam()));
  Var v = engine.new_variable(), w = engine.new_variable();
  for (int i = 0; i < 5; ++i) engine.push_sync([] {}, Context::cpu(), {}, {v}, {.name = "work"});
  for (int i = 0; i < 3; ++i) engine.push_sync([] {}, Context::cpu(), {v}, {}, {.name = "other"});
  engine.push_sync([] { throw std::runtime_error("bad"); }, Context::cpu(), {}, {w}, {.name = "bad"});
  engine.push_sync([] {}, Context::cpu(), {w}, {}, {.name = "skipped"});
  engine.push_sync([] {}, Context::cpu(), {}, {});
  EXPECT_THROW(engine.wait_for_all(), std::runtime_error);

  const ProfileSummary s = engine.profiler().summary();
  std::map<std::string, OpStats> rows;
  for (const OpStats& r : s.ops) rows[r.name] = r;
  EXPECT_EQ(rows.at("work").count, 5U);
  EXPECT_EQ(rows.at("other").count, 3U);
  EXPECT_EQ(rows.at("bad").count, 1U);
  EXPECT_EQ(rows.at("bad").failed, 1U);
  EXPECT_EQ(rows.at("skipped").skipped, 1U);
  EXPECT_EQ(rows.at("(unnamed)").count, 1U);
  EXPECT_EQ(rows.at("wait_for_all").count, 1U);
  EXPECT_EQ(s.unfinished, 0U);
  EXPECT_EQ(s.dropped_events, 0U);
  for (const OpStats& r : s.ops) {
    EXPECT_LE(r.mean_ns, r.max_ns);
    EXPECT_LE(r.p99_ns, r.max_ns);
    EXPECT_GE(r.total_ns, r.max_ns);
  }
  for (std::size_t i = 1; i < s.ops.size(); ++i) EXPECT_GE(s.ops[i - 1].total_ns, s.ops[i].total_ns);
  const std::string table = s.table();
  EXPECT_NE(table.find("count"), std::string::npos);
  EXPECT_NE(table.find("p99"), std::string::npos);
  EXPECT_TRUE(std::regex_search(table, std::regex(R"(\nwork +5 +0 +0 )"))) << table;
  std::ostringstream streamed;
  streamed << s;
  EXPECT_EQ(streamed.str(), table);
}

INSTANTIATE_TEST_SUITE_P(AllEngines, ProfilerKinds,
                         ::testing::Values(EngineKind::naive, EngineKind::pooled, EngineKind::per_device), kind_name);

// The discovered graph of a known program. A gate op holds every other op
// in the queues, so each dependency is discovered as a grant.
class ProfilerDot : public ::testing::TestWithParam<EngineKind> {};

TEST_P(ProfilerDot, EdgesAndVariableLabels) {
  Engine engine(profiled(GetParam(), 2));
  const Context cpu = Context::cpu();
  Var x = engine.new_variable(), y = engine.new_variable(), z = engine.new_variable(), w = engine.new_variable();
  Gate gate;
  engine.push_sync([&] { ASSERT_TRUE(gate.wait()); }, cpu, {}, {x}, {.name = "G"});
  engine.push_sync([] {}, cpu, {x}, {y}, {.name = "A"});
  engine.push_sync([] {}, cpu, {x}, {z}, {.name = "B"});
  engine.push_sync([] {}, cpu, {y, z}, {w}, {.name = "C"});
  engine.push_sync([] {}, cpu, {}, {w}, {.name = "E"});
  gate.open();
  engine.wait_for_all();

  std::ostringstream out;
  engine.profiler().write_dot(out);
  const std::string dot = out.str();
  ASSERT_EQ(dot.rfind("digraph ordo {", 0), 0U) << dot;
  ASSERT_EQ(dot.substr(dot.size() - 2), "}\n");

  std::map<std::string, std::string> node_name;  // "n3" -> "B"
  std::set<std::tuple<std::string, std::string, std::string>> edges;
  int released = 0;
  std::istringstream lines(dot);
  const std::regex node_re(R"re(^  (n\d+) \[label="#\d+ (\w+)\\n)re");
  const std::regex edge_re(
      R"re(^  (n\d+) -> (n\d+) \[label="(v\d+) ([rw])->([rw])"(, style=dashed)?(, penwidth=3, color="#1f77b4")?\];$)re");
  const std::regex bold_node_re(R"re(^  (n\d+) \[label=.*, penwidth=3, color="#1f77b4"\];$)re");
  std::vector<std::tuple<std::string, std::string, std::string, std::string>> raw;
  std::vector<std::pair<std::string, std::string>> bold_edges;
  std::set<std::string> bold_nodes;
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, node_re)) node_name[m[1]] = m[2];
    if (std::regex_match(line, m, bold_node_re)) bold_nodes.insert(m[1]);
    if (std::regex_match(line, m, edge_re)) {
      raw.emplace_back(m[1], m[2], m[3], std::string(m[4]) + std::string(m[5]));
      if (!m[6].matched) ++released;
      if (m[7].matched) bold_edges.emplace_back(m[1], m[2]);
    }
  }
  // The critical path, bold: G, then whichever of A and B made C ready (the
  // one that finished last), C, E; each bold edge one that made its target ready.
  std::set<std::string> bold_names;
  for (const std::string& n : bold_nodes) bold_names.insert(node_name.at(n));
  EXPECT_EQ(bold_names.size(), 4U) << dot;
  EXPECT_TRUE(bold_names.count("G") && bold_names.count("C") && bold_names.count("E")) << dot;
  EXPECT_NE(bold_names.count("A") + bold_names.count("B"), 2U) << dot;
  ASSERT_EQ(bold_edges.size(), 3U) << dot;
  EXPECT_EQ(node_name.at(bold_edges[0].first) + node_name.at(bold_edges[2].second), "GE") << dot;
  const CriticalPath cp = engine.profiler().summary().critical_path;
  ASSERT_EQ(cp.steps.size(), 4U);
  EXPECT_EQ(cp.steps.front().name, "G");
  EXPECT_EQ(cp.steps.back().name, "E");
  EXPECT_TRUE(bold_names.count(cp.steps[1].name)) << cp.steps[1].name;
  for (const CriticalStep& st : cp.steps) EXPECT_EQ(st.kind, "op");
  // The four steps, longest first. Which is longest is the scheduler's
  // business: the gate may open before G starts, and a preempted B may then
  // outlast it. The chain covers at most the run.
  ASSERT_EQ(cp.top.size(), cp.steps.size());
  const auto span = [](const CriticalStep& st) { return st.end_ns - st.begin_ns; };
  std::set<std::string> top_names;
  for (std::size_t i = 0; i < cp.top.size(); ++i) {
    top_names.insert(cp.top[i].name);
    if (i > 0) {
      EXPECT_GE(span(cp.top[i - 1]), span(cp.top[i])) << i;
    }
  }
  std::set<std::string> step_names;
  for (const CriticalStep& st : cp.steps) step_names.insert(st.name);
  EXPECT_EQ(top_names, step_names);
  EXPECT_LE(cp.length_ns, cp.wall_ns);
  EXPECT_GE(cp.length_ns, span(cp.top.front()));
  for (const auto& [from, to, var, modes] : raw) edges.emplace(node_name.at(from), node_name.at(to), var + " " + modes);
  const auto v = [](const Var& var) { return "v" + std::to_string(var.id()); };
  const std::set<std::tuple<std::string, std::string, std::string>> expected = {
      {"G", "A", v(x) + " wr"}, {"G", "B", v(x) + " wr"}, {"A", "C", v(y) + " wr"},
      {"B", "C", v(z) + " wr"}, {"C", "E", v(w) + " ww"},
  };
  EXPECT_EQ(edges, expected) << dot;
  EXPECT_EQ(raw.size(), expected.size());
  EXPECT_EQ(released, 4) << "C is made ready by one of A and B, the other edge is dashed\n" << dot;
  EXPECT_EQ(node_name.size(), 6U);  // with wait_for_all

  // The cap: fewer ops drawn, and the graph says so.
  std::ostringstream capped;
  engine.profiler().write_dot(capped, DotOptions{.max_ops = 2});
  EXPECT_NE(capped.str().find("showing the first 2 of 6 ops"), std::string::npos);
  EXPECT_EQ(capped.str().find("n3 "), std::string::npos);

  // Queue length counters in the trace, for the variables that queued.
  std::ostringstream trace;
  engine.profiler().write_chrome_trace(trace);
  const json::Value doc = json::parse(trace.str());
  std::map<std::string, int> peak;
  for (const json::Value& ev : doc["traceEvents"].array()) {
    if (ev["ph"].string() != "C") continue;
    int& p = peak[ev["name"].string()];
    p = std::max(p, static_cast<int>(ev["args"]["waiting"].number()));
  }
  EXPECT_EQ(peak.at(v(x) + " queue"), 2) << "A and B waited on x";
  EXPECT_EQ(peak.at(v(y) + " queue"), 1) << "C waited on y";
  EXPECT_EQ(peak.at(v(w) + " queue"), 1) << "only E waited on w (C's write was granted at its push)";
}

INSTANTIATE_TEST_SUITE_P(ThreadedEngines, ProfilerDot, ::testing::Values(EngineKind::pooled, EngineKind::per_device),
                         kind_name);

TEST(Profiler, OffByDefaultAndMisuseIsAClearError) {
  Engine engine(Options{.kind = EngineKind::naive});
  EXPECT_FALSE(engine.profiler().enabled());
  try {
    (void)engine.profiler().summary();
    FAIL() << "summary() on a disabled profiler did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("profile.enabled"), std::string::npos) << e.what();
  }
  std::ostringstream out;
  EXPECT_THROW(engine.profiler().write_chrome_trace(out), Error);
  EXPECT_THROW(engine.profiler().write_dot(out), Error);
  EXPECT_THROW(engine.profiler().clear(), Error);
  EXPECT_THROW((void)engine.profiler().data(), Error);
  EXPECT_THROW((void)engine.profiler().dropped_events(), Error);
  EXPECT_TRUE(out.str().empty());
}

TEST(Profiler, UnwritablePathThrowsSystemError) {
  Engine engine(profiled(EngineKind::naive));
  try {
    engine.profiler().write_chrome_trace("/nonexistent-ordo-dir/trace.json");
    FAIL() << "no error";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-ordo-dir/trace.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(engine.profiler().write_dot("/nonexistent-ordo-dir/g.dot"), std::system_error);
}

TEST(Profiler, BoundedMemoryCountsDroppedEventsAndClearStartsAgain) {
  Options o = profiled(EngineKind::naive);
  o.profile.max_events = 1;  // one chunk: 1024 events
  Engine engine(o);
  Var v = engine.new_variable();
  constexpr int kOps = 2000;
  for (int i = 0; i < kOps; ++i) engine.push_sync([] {}, Context::cpu(), {}, {v}, {.name = "tick"});
  engine.wait_for_all();
  Profiler prof = engine.profiler();
  EXPECT_GT(prof.dropped_events(), 0U);
  const ProfileData data = prof.data();
  EXPECT_LT(data.ops.size(), static_cast<std::size_t>(kOps));
  EXPECT_GT(data.ops.size(), 100U);
  EXPECT_EQ(data.dropped_events, prof.dropped_events());
  const ProfileSummary s = prof.summary();
  EXPECT_GT(s.dropped_events, 0U);
  EXPECT_NE(s.table().find("dropped"), std::string::npos);
  std::ostringstream out;
  prof.write_chrome_trace(out);
  const json::Value doc = json::parse(out.str());
  EXPECT_GT(doc["otherData"]["dropped_events"].number(), 0);

  prof.clear();
  EXPECT_EQ(prof.dropped_events(), 0U);
  EXPECT_TRUE(prof.data().ops.empty());
  for (int i = 0; i < 10; ++i) engine.push_sync([] {}, Context::cpu(), {}, {v}, {.name = "tock"});
  engine.wait_for_all();
  const ProfileData again = prof.data();
  EXPECT_EQ(again.dropped_events, 0U);
  EXPECT_EQ(again.ops.size(), 11U);  // 10 tocks + wait_for_all
  EXPECT_EQ(again.ops.front().id, 1U);
}

TEST(Profiler, OptionsFromEnv) {
  ::setenv("ORDO_PROFILE", "/tmp/some trace.json", 1);
  Options o = Options::from_env();
  EXPECT_TRUE(o.profile.enabled);
  EXPECT_EQ(o.profile.trace_path, "/tmp/some trace.json");
  ::setenv("ORDO_PROFILE", "1", 1);
  ::setenv("ORDO_PROFILE_MAX_EVENTS", "4096", 1);
  o = Options::from_env();
  EXPECT_TRUE(o.profile.enabled);
  EXPECT_EQ(o.profile.trace_path, ProfileOptions::kDefaultTracePath);  // "on" always leaves a trace
  EXPECT_EQ(o.profile.max_events, 4096U);
  ::setenv("ORDO_PROFILE", "0", 1);
  Options base;
  base.profile.enabled = true;
  EXPECT_FALSE(Options::from_env(base).profile.enabled);
  ::setenv("ORDO_PROFILE_MAX_EVENTS", "lots", 1);
  EXPECT_THROW((void)Options::from_env(), Error);
  ::unsetenv("ORDO_PROFILE_MAX_EVENTS");
  ::setenv("ORDO_PROFILE", "", 1);
  EXPECT_THROW((void)Options::from_env(), Error);
  ::unsetenv("ORDO_PROFILE");
  EXPECT_FALSE(Options::from_env().profile.enabled);
}

TEST(Profiler, TraceWrittenWhenTheEngineIsDestroyed) {
  const std::string path = ::testing::TempDir() + "ordo_profiler_destructor_trace.json";
  std::remove(path.c_str());
  {
    Options o = profiled(EngineKind::pooled, 2);
    o.profile.trace_path = path;
    Engine engine(o);
    Var v = engine.new_variable();
    for (int i = 0; i < 10; ++i) engine.push_sync([] {}, Context::cpu(), {}, {v}, {.name = "step"});
  }  // drains, then writes
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream text;
  text << in.rdbuf();
  const json::Value doc = json::parse(text.str());
  int steps = 0;
  for (const json::Value& ev : doc["traceEvents"].array()) {
    if (ev["ph"].string() == "X" && ev["name"].string() == "step") ++steps;
  }
  EXPECT_EQ(steps, 10);
  std::remove(path.c_str());

  // An unwritable path is reported, never thrown from the destructor.
  ::testing::internal::CaptureStderr();
  {
    Options o = profiled(EngineKind::naive);
    o.profile.trace_path = "/nonexistent-ordo-dir/trace.json";
    Engine engine(o);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("could not write its trace"), std::string::npos) << err;
}

TEST(Profiler, ReadersAndClearRaceWithRecordingSafely) {
  // Readers take the per-thread buffers' locks while workers record: run
  // under TSan, this is the test of the recording protocol.
  Engine engine(profiled(EngineKind::pooled, 3));
  std::vector<Var> vars;
  for (int i = 0; i < 8; ++i) vars.push_back(engine.new_variable());
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    while (!done.load(std::memory_order_acquire)) {
      const ProfileData d = engine.profiler().data();
      for (const OpProfile& p : d.ops) {
        if (p.status == ProfiledStatus::ok) {
          EXPECT_LE(p.start_ns, p.end_ns);
        }
      }
      std::ostringstream sink;
      engine.profiler().write_chrome_trace(sink);
      (void)json::parse(sink.str());
      if (reads.fetch_add(1) % 4 == 3) engine.profiler().clear();
    }
  });
  const int ops = 20000 / kScale;
  std::uint32_t seed = 12345;  // fixed: the shape does not matter, only the concurrency
  for (int i = 0; i < ops; ++i) {
    seed = seed * 1664525U + 1013904223U;
    Var r = vars[(seed >> 8) % vars.size()];
    Var w = vars[(seed >> 16) % vars.size()];
    engine.push_sync([] {}, Context::cpu(), {r}, {w}, {.name = (i % 2) != 0 ? "odd" : "even"});
  }
  engine.wait_for_all();
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_GT(reads.load(), 0);
  engine.profiler().clear();
  engine.push_sync([] {}, Context::cpu(), {}, {vars[0]}, {.name = "last"});
  engine.wait_for_all();
  const ProfileData d = engine.profiler().data();
  ASSERT_EQ(d.ops.size(), 2U);
  EXPECT_EQ(d.ops[0].name, "last");
  EXPECT_EQ(d.ops[0].status, ProfiledStatus::ok);
}

TEST(Profiler, ThreadTracksAreNamed) {
  Engine engine(profiled(EngineKind::pooled, 2));
  Var v = engine.new_variable();
  engine.push_sync([] {}, Context::cpu(), {}, {v}, {.name = "one"});
  engine.wait_for_all();
  const ProfileData d = engine.profiler().data();
  bool worker = false;
  bool main_thread = false;
  for (const std::string& t : d.threads) {
    worker = worker || t.rfind("cpu/", 0) == 0;
    main_thread = main_thread || t.find("(main)") != std::string::npos;
  }
  EXPECT_TRUE(worker);
  EXPECT_TRUE(main_thread);
  ASSERT_EQ(d.ops.size(), 2U);
  EXPECT_EQ(d.threads.at(static_cast<std::size_t>(d.ops[0].run_thread)).rfind("cpu/", 0), 0U);
  EXPECT_NE(d.threads.at(static_cast<std::size_t>(d.ops[0].push_thread)).find("(main)"), std::string::npos);
}

}  // namespace
}  // namespace ordo::test
