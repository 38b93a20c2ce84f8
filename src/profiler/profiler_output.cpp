// src/profiler/profiler_output.cpp - ordo::Profiler: the Chrome trace, the DOT graph
// and the summary, all written from one ProfileData.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <queue>
#include <set>
#include <sstream>
#include <system_error>
#include <unordered_map>

#include "ordo/error.hpp"
#include "critical_path.hpp"
#include "ordo/profiler.hpp"
#include "profiler.hpp"

namespace ordo {

const char* to_string(ProfiledKind k) noexcept {
  switch (k) {
    case ProfiledKind::sync: return "sync";
    case ProfiledKind::async: return "async";
    case ProfiledKind::post: return "post";
    case ProfiledKind::wait_for_var: return "wait_for_var";
    case ProfiledKind::wait_for_all: return "wait_for_all";
    case ProfiledKind::delete_variable: return "delete_variable";
  }
  return "unknown";
}

const char* to_string(ProfiledStatus s) noexcept {
  switch (s) {
    case ProfiledStatus::ok: return "ok";
    case ProfiledStatus::failed: return "failed";
    case ProfiledStatus::skipped: return "skipped";
    case ProfiledStatus::unfinished: return "unfinished";
  }
  return "unknown";
}

namespace {

const char* prop_name(FnProperty p) noexcept {
  switch (p) {
    case FnProperty::normal: return "normal";
    case FnProperty::copy_to_device: return "copy_to_device";
    case FnProperty::copy_from_device: return "copy_from_device";
    case FnProperty::cpu_prioritized: return "cpu_prioritized";
    case FnProperty::async: return "async";
    case FnProperty::delete_var: return "delete_var";
  }
  return "unknown";
}

std::string ctx_name(Context c) { return (c.is_gpu() ? "gpu(" : "cpu(") + std::to_string(c.device_id) + ")"; }

std::string display_name(const OpProfile& p) { return p.name.empty() ? "(unnamed)" : p.name; }

/// JSON string literal (UTF-8 passes through; control characters escaped).
void json_string(std::ostream& os, std::string_view s) {
  os << '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': os << "\\\""; break;
      case '\\': os << "\\\\"; break;
      case '\n': os << "\\n"; break;
      case '\r': os << "\\r"; break;
      case '\t': os << "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          os << buf;
        } else {
          os << ch;
        }
    }
  }
  os << '"';
}

/// Nanoseconds as microseconds with three decimals (the trace's unit), exact.
void json_us(std::ostream& os, std::int64_t ns) {
  if (ns < 0) {
    os << '-';
    ns = -ns;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000), static_cast<long long>(ns % 1000));
  os << buf;
}

std::string human(std::int64_t ns) {
  char buf[32];
  if (ns < 10'000) {
    std::snprintf(buf, sizeof buf, "%lld ns", static_cast<long long>(ns));
  } else if (ns < 10'000'000) {
    std::snprintf(buf, sizeof buf, "%.1f us", static_cast<double>(ns) / 1e3);
  } else if (ns < 10'000'000'000) {
    std::snprintf(buf, sizeof buf, "%.2f ms", static_cast<double>(ns) / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f s", static_cast<double>(ns) / 1e9);
  }
  return buf;
}

bool finished(const OpProfile& p) {
  return p.status != ProfiledStatus::unfinished && p.start_ns >= 0 && p.end_ns >= 0;
}

// Trace processes.
constexpr int kThreadsPid = 1;
constexpr int kAsyncPid = 2;
constexpr int kQueuesPid = 3;
/// Slices (SliceProfile): one process per category.
constexpr int kIoPid = 4;
constexpr int kGpuPid = 5;
constexpr int kTransferPid = 6;

int slice_pid(const SliceProfile& sp) {
  if (sp.category == "gpu") return kGpuPid;
  if (sp.category == "transfer") return kTransferPid;
  return kIoPid;
}

const char* slice_process(int pid) {
  switch (pid) {
    case kGpuPid: return "ordo gpu (kernels and copies, per device and stream)";
    case kTransferPid: return "ordo transfers (dist sends and receives)";
    default: return "ordo io (requests, submission to delivery)";
  }
}

/// Greedy lanes: slices of one group whose times overlap go on different
/// lanes, numbered from 1. `order` holds indices into `s`, sorted by begin.
template <class Begin, class End>
std::vector<int> lanes(const std::vector<std::size_t>& order, std::size_t n, Begin begin, End end, int& count) {
  std::vector<int> lane(n, 0);
  std::vector<std::int64_t> lane_end;
  for (std::size_t i : order) {
    std::size_t l = 0;
    while (l < lane_end.size() && lane_end[l] > begin(i)) ++l;
    if (l == lane_end.size()) lane_end.push_back(0);
    lane_end[l] = end(i);
    lane[i] = static_cast<int>(l) + 1;
  }
  count = static_cast<int>(lane_end.size());
  return lane;
}

/// Where one op's slice is drawn.
struct Slice {
  int pid = 0;  ///< 0: not drawn
  int tid = 0;
  std::int64_t ts = 0;
  std::int64_t end = 0;
};

void write_trace(std::ostream& os, const ProfileData& d) {
  // Slices: async ops on "lanes" (virtual threads of kAsyncPid, assigned
  // greedily so that slices on a lane never overlap); the rest on the track
  // of the thread that ran them, waits on the waiting thread's.
  std::vector<Slice> slice(d.ops.size());
  std::vector<std::size_t> async_ops;
  for (std::size_t i = 0; i < d.ops.size(); ++i) {
    const OpProfile& p = d.ops[i];
    if (!finished(p)) continue;
    Slice& s = slice[i];
    s.pid = kThreadsPid;
    s.end = p.end_ns;
    switch (p.kind) {
      case ProfiledKind::wait_for_var:
        s.tid = p.push_thread + 1;
        s.ts = p.push_ns;
        break;
      case ProfiledKind::async:
        async_ops.push_back(i);
        s.pid = kAsyncPid;
        s.ts = p.start_ns;
        break;
      default:
        s.tid = p.run_thread + 1;
        s.ts = p.start_ns;
    }
  }
  std::sort(async_ops.begin(), async_ops.end(), [&](std::size_t a, std::size_t b) { return slice[a].ts < slice[b].ts; });
  int async_lanes = 0;
  const std::vector<int> async_lane = lanes(
      async_ops, d.ops.size(), [&](std::size_t i) { return slice[i].ts; }, [&](std::size_t i) { return slice[i].end; },
      async_lanes);
  for (std::size_t i : async_ops) slice[i].tid = async_lane[i];

  // Slices (io requests, GPU work, transfers): per category a process, per
  // track as many lanes as overlapping slices need ("io_uring #2").
  std::vector<Slice> ext(d.slices.size());
  std::map<std::pair<int, std::string>, std::vector<std::size_t>> by_track;
  for (std::size_t i = 0; i < d.slices.size(); ++i) {
    const SliceProfile& sp = d.slices[i];
    if (sp.begin_ns < 0 || sp.end_ns < 0) continue;
    by_track[{slice_pid(sp), sp.track}].push_back(i);  // in begin order: d.slices is sorted
  }
  struct TrackName {
    int pid;
    int tid;
    std::string name;
  };
  std::vector<TrackName> ext_tracks;
  std::map<int, int> next_tid;  // per process
  for (const auto& [key, order] : by_track) {
    int count = 0;
    const std::vector<int> lane = lanes(
        order, d.slices.size(), [&](std::size_t i) { return d.slices[i].begin_ns; },
        [&](std::size_t i) { return d.slices[i].end_ns; }, count);
    const int base = next_tid[key.first];
    next_tid[key.first] += count;
    for (int l = 1; l <= count; ++l) {
      ext_tracks.push_back({key.first, base + l, count == 1 ? key.second : key.second + " #" + std::to_string(l)});
    }
    for (std::size_t i : order) ext[i] = Slice{key.first, base + lane[i], d.slices[i].begin_ns, d.slices[i].end_ns};
  }

  std::size_t unfinished = 0;
  for (const OpProfile& p : d.ops) unfinished += finished(p) ? 0 : 1;

  os << "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"ordo\",\"ops\":" << d.ops.size()
     << ",\"unfinished_ops\":" << unfinished << ",\"dropped_events\":" << d.dropped_events
     << ",\"clock_origin_ns\":" << d.clock_origin_ns << "},\n\"traceEvents\":[\n";
  bool first = true;
  auto begin = [&]() -> std::ostream& {
    if (!first) os << ",\n";
    first = false;
    return os;
  };
  auto meta = [&](const char* what, int pid, int tid, std::string_view value) {
    begin() << "{\"ph\":\"M\",\"name\":\"" << what << "\",\"pid\":" << pid << ",\"tid\":" << tid
            << ",\"args\":{\"name\":";
    json_string(os, value);
    os << "}}";
  };
  meta("process_name", kThreadsPid, 0, "ordo threads");
  for (std::size_t t = 0; t < d.threads.size(); ++t) {
    meta("thread_name", kThreadsPid, static_cast<int>(t) + 1, d.threads[t]);
    begin() << "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" << kThreadsPid << ",\"tid\":" << t + 1
            << ",\"args\":{\"sort_index\":" << t + 1 << "}}";
  }
  if (async_lanes > 0) {
    meta("process_name", kAsyncPid, 0, "ordo async ops (push to OnComplete)");
    for (int l = 0; l < async_lanes; ++l) meta("thread_name", kAsyncPid, l + 1, "async lane " + std::to_string(l + 1));
  }
  for (const auto& [pid, count] : next_tid) meta("process_name", pid, 0, slice_process(pid));
  for (const TrackName& t : ext_tracks) meta("thread_name", t.pid, t.tid, t.name);
  if (d.dropped_events > 0) {
    begin() << "{\"ph\":\"i\",\"s\":\"g\",\"pid\":" << kThreadsPid << ",\"tid\":0,\"ts\":0,\"name\":";
    json_string(os, "ordo: " + std::to_string(d.dropped_events) +
                        " events dropped (ProfileOptions::max_events reached): later ops are missing");
    os << "}";
  }

  // One complete ("X") event per finished op, with every field in args.
  for (std::size_t i = 0; i < d.ops.size(); ++i) {
    const OpProfile& p = d.ops[i];
    const Slice& s = slice[i];
    if (s.pid == 0) continue;
    const bool wait = p.kind == ProfiledKind::wait_for_var || p.kind == ProfiledKind::wait_for_all;
    begin() << "{\"ph\":\"X\",\"cat\":\"" << (wait ? "wait" : "op") << "\",\"name\":";
    json_string(os, display_name(p));
    os << ",\"pid\":" << s.pid << ",\"tid\":" << s.tid << ",\"ts\":";
    json_us(os, s.ts);
    os << ",\"dur\":";
    json_us(os, s.end - s.ts);
    os << ",\"args\":{\"id\":" << p.id << ",\"kind\":\"" << to_string(p.kind) << "\",\"status\":\""
       << to_string(p.status) << "\",\"prop\":\"" << prop_name(p.prop) << "\",\"ctx\":\"" << ctx_name(p.ctx)
       << "\",\"priority\":" << p.priority << ",\"push_us\":";
    json_us(os, p.push_ns);
    os << ",\"grant_us\":";
    json_us(os, p.grant_ns);
    os << ",\"start_us\":";
    json_us(os, p.start_ns);
    os << ",\"end_us\":";
    json_us(os, p.end_ns);
    if (p.body_end_ns >= 0) {
      os << ",\"body_end_us\":";
      json_us(os, p.body_end_ns);
    }
    os << ",\"push_thread\":";
    json_string(os, p.push_thread >= 0 ? d.threads[static_cast<std::size_t>(p.push_thread)] : "");
    os << ",\"run_thread\":";
    json_string(os, p.run_thread >= 0 ? d.threads[static_cast<std::size_t>(p.run_thread)] : "");
    os << ",\"end_thread\":";
    json_string(os, p.end_thread >= 0 ? d.threads[static_cast<std::size_t>(p.end_thread)] : "");
    os << ",\"reads\":[";
    bool comma = false;
    for (const ProfiledAccess& a : p.accesses) {
      if (a.write) continue;
      os << (comma ? "," : "") << a.var;
      comma = true;
    }
    os << "],\"writes\":[";
    comma = false;
    for (const ProfiledAccess& a : p.accesses) {
      if (!a.write) continue;
      os << (comma ? "," : "") << a.var;
      comma = true;
    }
    os << "]";
    if (!p.error.empty()) {
      os << ",\"error\":";
      json_string(os, p.error);
    }
    os << "}}";
    // An async op's body on the worker that called it (from start to body return).
    if (p.kind == ProfiledKind::async && p.body_end_ns >= 0 && p.run_thread >= 0) {
      begin() << "{\"ph\":\"X\",\"cat\":\"body\",\"name\":";
      json_string(os, display_name(p) + " (body)");
      os << ",\"pid\":" << kThreadsPid << ",\"tid\":" << p.run_thread + 1 << ",\"ts\":";
      json_us(os, p.start_ns);
      os << ",\"dur\":";
      json_us(os, std::max<std::int64_t>(0, p.body_end_ns - p.start_ns));
      os << ",\"args\":{\"op\":" << p.id << "}}";
    }
  }

  // One complete event per finished slice.
  for (std::size_t i = 0; i < d.slices.size(); ++i) {
    const SliceProfile& sp = d.slices[i];
    const Slice& x = ext[i];
    if (x.pid == 0) continue;
    begin() << "{\"ph\":\"X\",\"cat\":";
    json_string(os, sp.category);
    os << ",\"name\":";
    json_string(os, sp.name);
    os << ",\"pid\":" << x.pid << ",\"tid\":" << x.tid << ",\"ts\":";
    json_us(os, x.ts);
    os << ",\"dur\":";
    json_us(os, x.end - x.ts);
    os << ",\"args\":{\"slice\":" << sp.id << ",\"track\":";
    json_string(os, sp.track);
    os << ",\"bytes\":" << sp.bytes << ",\"result\":" << sp.result << ",\"launched_by\":" << sp.launched_by;
    if (sp.peer >= 0) os << ",\"peer\":" << sp.peer << ",\"key\":" << sp.key << ",\"var\":" << sp.var;
    os << ",\"thread\":";
    json_string(os, sp.thread >= 0 ? d.threads[static_cast<std::size_t>(sp.thread)] : "");
    os << "}}";
  }

  // Flow arrows: from an op's slice (at its end) to the slice of each op it
  // made ready (at its start; a wait: at its end).
  std::uint64_t flow = 0;
  // A flow from (pid, tid, ts) to (pid, tid, ts), bound to the slices
  // enclosing those points; `cat` names the kind of arrow.
  auto arrow = [&](const char* cat, const Slice& a, std::int64_t a_ts, const Slice& b, std::int64_t b_ts,
                   const std::string& args) {
    ++flow;
    begin() << "{\"ph\":\"s\",\"cat\":\"" << cat << "\",\"name\":\"" << cat << "\",\"id\":" << flow
            << ",\"pid\":" << a.pid << ",\"tid\":" << a.tid << ",\"ts\":";
    json_us(os, a_ts);
    os << ",\"args\":{" << args << "}}";
    begin() << "{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"" << cat << "\",\"name\":\"" << cat << "\",\"id\":" << flow
            << ",\"pid\":" << b.pid << ",\"tid\":" << b.tid << ",\"ts\":";
    json_us(os, b_ts);
    os << ",\"args\":{" << args << "}}";
  };
  auto inside = [](const Slice& x, std::int64_t t) { return std::clamp(t, x.ts, std::max(x.ts, x.end - 1)); };
  for (std::size_t i = 0; i < d.slices.size(); ++i) {
    const SliceProfile& sp = d.slices[i];
    if (ext[i].pid == 0 || sp.launched_by == 0) continue;
    // From the op whose body began it: on the worker's track where the body
    // ran (an async op's body slice), else on the op's own slice.
    const OpProfile& op = d.ops[sp.launched_by - 1];
    Slice from = slice[sp.launched_by - 1];
    if (op.kind == ProfiledKind::async && op.body_end_ns >= 0 && op.run_thread >= 0) {
      from = Slice{kThreadsPid, op.run_thread + 1, op.start_ns, std::max(op.start_ns, op.body_end_ns)};
    }
    if (from.pid == 0) continue;
    arrow("launch", from, inside(from, sp.begin_ns), ext[i], ext[i].ts,
          "\"op\":" + std::to_string(sp.launched_by) + ",\"slice\":" + std::to_string(sp.id));
  }
  for (const SliceRelease& r : d.slice_releases) {
    const Slice& a = ext[r.slice - 1];
    const Slice& b = slice[r.op - 1];
    if (a.pid == 0 || b.pid == 0) continue;
    // A fence holds an op from its grant to its start; a wait_for_var is
    // drawn from its call, so its release is its end.
    const bool at_end = r.at_end || (r.fence && d.ops[r.op - 1].kind == ProfiledKind::wait_for_var);
    arrow(r.fence ? "fence" : "completion", a, std::max(a.ts, a.end - 1), b, at_end ? std::max(b.ts, b.end - 1) : b.ts,
          "\"slice\":" + std::to_string(r.slice) + ",\"op\":" + std::to_string(r.op) + ",\"at\":\"" +
              (at_end ? "end" : r.fence ? "start" : "push") + "\"");
  }
  // GPU work on one stream that waited for another stream's work.
  for (const SliceWait& w : d.slice_waits) {
    const Slice& a = ext[w.before - 1];
    const Slice& b = ext[w.after - 1];
    if (w.same_stream || a.pid == 0 || b.pid == 0) continue;
    arrow("stream_wait", a, std::max(a.ts, a.end - 1), b, b.ts,
          "\"before\":" + std::to_string(w.before) + ",\"after\":" + std::to_string(w.after));
  }
  for (const DependencyEdge& e : d.edges) {
    if (!e.released) continue;
    const std::size_t from = e.from - 1;
    const std::size_t to = e.to - 1;
    const Slice& a = slice[from];
    const Slice& b = slice[to];
    if (a.pid == 0 || b.pid == 0) continue;
    const bool to_wait = d.ops[to].kind == ProfiledKind::wait_for_var;
    arrow("release", a, std::max(a.ts, a.end - 1), b, to_wait ? std::max(b.ts, b.end - 1) : b.ts,
          "\"from\":" + std::to_string(e.from) + ",\"to\":" + std::to_string(e.to) + ",\"var\":" +
              std::to_string(e.var));
  }

  // Queue length per variable over time: +1 when an access is queued (at the
  // push), -1 when it is granted (an edge). Accesses granted at once never
  // queue; accesses still queued when the profile was taken are not counted.
  std::map<std::uint32_t, std::vector<std::pair<std::int64_t, int>>> changes;
  for (const DependencyEdge& e : d.edges) {
    changes[e.var].push_back({d.ops[e.to - 1].push_ns, +1});
    changes[e.var].push_back({e.time_ns, -1});
  }
  if (!changes.empty()) meta("process_name", kQueuesPid, 0, "ordo variable queues (waiting accesses)");
  for (auto& [var, list] : changes) {
    std::stable_sort(list.begin(), list.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    int waiting = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
      waiting += list[i].second;
      if (i + 1 < list.size() && list[i + 1].first == list[i].first) continue;  // one sample per instant
      begin() << "{\"ph\":\"C\",\"name\":\"v" << var << " queue\",\"pid\":" << kQueuesPid << ",\"tid\":0,\"ts\":";
      json_us(os, list[i].first);
      os << ",\"args\":{\"waiting\":" << waiting << "}}";
    }
  }
  os << "\n]}\n";
}

std::string dot_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void write_dot_graph(std::ostream& os, const ProfileData& d, const DotOptions& o) {
  const std::size_t n = std::min(d.ops.size(), o.max_ops);
  // The critical path: bold blue nodes and edges, its requests as notes.
  const CriticalPath cp = detail::critical_path(d);
  std::set<std::uint64_t> path_ops;
  std::set<std::string> path_links;  // "n1->n2": consecutive steps
  auto node_id = [](const CriticalStep& st) { return (st.kind == "op" ? "n" : "s") + std::to_string(st.id); };
  for (std::size_t i = 0; i < cp.steps.size(); ++i) {
    if (cp.steps[i].kind == "op") path_ops.insert(cp.steps[i].id);
    if (i > 0) path_links.insert(node_id(cp.steps[i - 1]) + "->" + node_id(cp.steps[i]));
  }
  const char* bold = ", penwidth=3, color=\"#1f77b4\"";
  os << "digraph ordo {\n  graph [rankdir=TB, labelloc=t, fontname=\"Helvetica\", label=\"ordo: dependencies the engine "
        "discovered (solid: made it ready; dashed: also waited for it; bold blue: the critical path)";
  if (n < d.ops.size()) os << "\\nshowing the first " << n << " of " << d.ops.size() << " ops (DotOptions::max_ops)";
  if (d.dropped_events > 0) os << "\\n" << d.dropped_events << " events dropped: later ops missing";
  os << "\"];\n  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n  edge [fontname=\"Helvetica\", "
        "fontsize=10];\n";
  for (std::size_t i = 0; i < n; ++i) {
    const OpProfile& p = d.ops[i];
    std::ostringstream label;  // (not string operator+: g++ 12 warns falsely about it at -O3)
    label << '#' << p.id << ' ' << display_name(p) << '\n' << to_string(p.kind) << ' ' << ctx_name(p.ctx);
    if (finished(p)) {
      label << ' ' << human(p.end_ns - (p.kind == ProfiledKind::wait_for_var ? p.push_ns : p.start_ns));
    }
    if (p.status != ProfiledStatus::ok) label << '\n' << to_string(p.status);
    if (!p.error.empty()) label << ": " << p.error;
    os << "  n" << p.id << " [label=\"" << dot_escape(label.str()) << "\"";
    if (path_ops.count(p.id) != 0) {
      os << ", penwidth=3, color=\"" << (p.status == ProfiledStatus::failed ? "red" : "#1f77b4") << "\"";
    } else if (p.status == ProfiledStatus::failed) {
      os << ", color=red";
    }
    if (p.status == ProfiledStatus::skipped || p.status == ProfiledStatus::unfinished) os << ", style=\"rounded,dashed\"";
    os << "];\n";
  }
  // The critical path's requests (io, gpu, transfers), with the links to
  // the ops around them on the path.
  for (std::size_t i = 0; i < cp.steps.size(); ++i) {
    const CriticalStep& st = cp.steps[i];
    if (st.kind == "op") continue;
    std::ostringstream label;
    label << st.kind << ' ' << st.name << " #" << st.id << '\n' << human(st.end_ns - st.begin_ns);
    os << "  s" << st.id << " [shape=note, label=\"" << dot_escape(label.str()) << "\"" << bold << "];\n";
    for (const std::size_t j : {i - 1, i + 1}) {
      if (j >= cp.steps.size() || (cp.steps[j].kind == "op" && cp.steps[j].id > n)) continue;
      const std::size_t from = std::min(i, j), to = std::max(i, j);
      if (j < i && cp.steps[j].kind != "op") continue;  // two requests in a row: drawn once, from the first
      os << "  " << node_id(cp.steps[from]) << " -> " << node_id(cp.steps[to]) << " [" << bold + 2 << "];\n";
    }
  }
  auto mode = [&](std::uint64_t op, std::uint32_t var) {
    for (const ProfiledAccess& a : d.ops[op - 1].accesses) {
      if (a.var == var) return a.write ? "w" : "r";
    }
    return "?";
  };
  for (const DependencyEdge& e : d.edges) {
    if (e.from > n || e.to > n) continue;
    const bool on_path = path_links.count("n" + std::to_string(e.from) + "->n" + std::to_string(e.to)) != 0;
    os << "  n" << e.from << " -> n" << e.to << " [label=\"v" << e.var << " " << mode(e.from, e.var) << "->"
       << mode(e.to, e.var) << "\"" << (e.released ? "" : ", style=dashed") << (on_path ? bold : "") << "];\n";
  }
  os << "}\n";
}

/// Nearest rank of sorted, non-empty `v`: the smallest value with at least
/// `percent`% of the values at or below it.
std::int64_t nearest_rank(const std::vector<std::int64_t>& v, std::size_t percent) {
  const std::size_t rank = (v.size() * percent + 99) / 100;
  return v[std::max<std::size_t>(rank, 1) - 1];
}

ProfileSummary summarize(const ProfileData& d) {
  ProfileSummary s;
  s.dropped_events = d.dropped_events;
  struct Acc {
    OpStats stats;
    std::vector<std::int64_t> runs;
    std::int64_t wait = 0;
    std::int64_t queue = 0;
  };
  std::map<std::string, Acc> by_name;
  for (const OpProfile& p : d.ops) {
    if (!finished(p)) {
      ++s.unfinished;
      continue;
    }
    Acc& a = by_name[display_name(p)];
    ++a.stats.count;
    if (p.status == ProfiledStatus::failed) ++a.stats.failed;
    if (p.status == ProfiledStatus::skipped) ++a.stats.skipped;
    // A wait_for_var's run time is the time its caller was blocked (as drawn in the trace).
    a.runs.push_back(p.end_ns - (p.kind == ProfiledKind::wait_for_var ? p.push_ns : p.start_ns));
    a.wait += p.grant_ns - p.push_ns;
    a.queue += p.start_ns - p.grant_ns;
  }
  for (auto& [name, a] : by_name) {
    OpStats st = a.stats;
    st.name = name;
    std::sort(a.runs.begin(), a.runs.end());
    for (const std::int64_t r : a.runs) st.total_ns += r;
    const auto count = static_cast<std::int64_t>(st.count);
    st.mean_ns = st.total_ns / count;
    st.max_ns = a.runs.back();
    st.p99_ns = nearest_rank(a.runs, 99);
    st.mean_wait_ns = a.wait / count;
    st.mean_queue_ns = a.queue / count;
    s.ops.push_back(std::move(st));
  }
  std::stable_sort(s.ops.begin(), s.ops.end(),
                   [](const OpStats& x, const OpStats& y) { return x.total_ns > y.total_ns; });
  std::map<std::pair<std::string, std::string>, std::pair<SliceStats, std::vector<std::int64_t>>> by_kind;
  for (const SliceProfile& sp : d.slices) {
    if (sp.end_ns < 0) continue;
    auto& [st, times] = by_kind[{sp.category, sp.name}];
    ++st.count;
    st.failed += sp.result < 0 ? 1 : 0;
    st.bytes += sp.bytes;
    times.push_back(sp.end_ns - sp.begin_ns);
  }
  for (auto& [key, acc] : by_kind) {
    auto& [st, times] = acc;
    st.category = key.first;
    st.name = key.second;
    std::sort(times.begin(), times.end());
    for (const std::int64_t t : times) st.total_ns += t;
    st.p50_ns = nearest_rank(times, 50);
    st.p99_ns = nearest_rank(times, 99);
    st.max_ns = times.back();
    s.slices.push_back(std::move(st));
  }
  std::stable_sort(s.slices.begin(), s.slices.end(),
                   [](const SliceStats& x, const SliceStats& y) { return x.total_ns > y.total_ns; });
  s.critical_path = detail::critical_path(d);
  return s;
}

template <class Write>
void write_file(const std::string& path, const char* what, Write&& write) {
  std::ofstream f(path, std::ios::out | std::ios::trunc);
  if (!f) throw std::system_error(errno, std::generic_category(), std::string(what) + ": cannot open '" + path + "'");
  write(f);
  f.flush();
  if (!f) throw std::system_error(errno, std::generic_category(), std::string(what) + ": cannot write '" + path + "'");
}

}  // namespace

std::string ProfileSummary::table() const {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-24s %8s %6s %7s %11s %11s %11s %11s %11s %11s\n", "op", "count", "failed",
                "skipped", "total", "mean", "p99", "max", "wait(mean)", "queue(mean)");
  os << line;
  for (const OpStats& s : ops) {
    std::string name = s.name.size() > 24 ? s.name.substr(0, 21) + "..." : s.name;
    std::snprintf(line, sizeof line, "%-24s %8llu %6llu %7llu %11s %11s %11s %11s %11s %11s\n", name.c_str(),
                  static_cast<unsigned long long>(s.count), static_cast<unsigned long long>(s.failed),
                  static_cast<unsigned long long>(s.skipped), human(s.total_ns).c_str(), human(s.mean_ns).c_str(),
                  human(s.p99_ns).c_str(), human(s.max_ns).c_str(), human(s.mean_wait_ns).c_str(),
                  human(s.mean_queue_ns).c_str());
    os << line;
  }
  if (unfinished > 0) os << unfinished << " op(s) not finished (not counted above)\n";
  if (!slices.empty()) {
    std::snprintf(line, sizeof line, "\n%-9s %-14s %8s %6s %11s %11s %11s %11s %11s\n", "work", "request", "count",
                  "failed", "bytes", "total", "p50", "p99", "max");
    os << line;
    for (const SliceStats& s : slices) {
      std::string name = s.name.size() > 14 ? s.name.substr(0, 11) + "..." : s.name;
      std::snprintf(line, sizeof line, "%-9s %-14s %8llu %6llu %11llu %11s %11s %11s %11s\n", s.category.c_str(),
                    name.c_str(), static_cast<unsigned long long>(s.count), static_cast<unsigned long long>(s.failed),
                    static_cast<unsigned long long>(s.bytes), human(s.total_ns).c_str(), human(s.p50_ns).c_str(),
                    human(s.p99_ns).c_str(), human(s.max_ns).c_str());
      os << line;
    }
  }
  if (!critical_path.steps.empty()) {
    const CriticalPath& cp = critical_path;
    os << "\ncritical path: " << cp.steps.size() << " step(s), " << human(cp.length_ns) << " of "
       << human(cp.wall_ns) << " wall time";
    if (cp.wall_ns > 0) os << " (" << (100 * cp.length_ns + cp.wall_ns / 2) / cp.wall_ns << "%)";
    os << "\n  longest on it:";
    for (const CriticalStep& st : cp.top) {
      os << ' ' << (st.kind == "op" ? "" : st.kind + " ") << st.name << " #" << st.id << " ("
         << human(st.end_ns - st.begin_ns) << ")" << (&st == &cp.top.back() ? "" : ",");
    }
    os << "\n";
  }
  if (dropped_events > 0) {
    os << dropped_events << " event(s) dropped: ProfileOptions::max_events was reached; later ops are missing\n";
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const ProfileSummary& s) { return os << s.table(); }

detail::ProfilerCore& Profiler::core() const {
  if (core_ == nullptr) {
    throw Error(Errc::invalid_argument,
                "ordo::Profiler: profiling is off for this engine (set Options::profile.enabled = true, or "
                "ORDO_PROFILE=1 with Options::from_env(), before constructing the engine)");
  }
  return *core_;
}

ProfileData Profiler::data() const { return core().data(); }

void Profiler::write_chrome_trace(std::ostream& os) const { write_trace(os, core().data()); }

void Profiler::write_chrome_trace(const std::string& path) const {
  const ProfileData d = core().data();
  write_file(path, "write_chrome_trace", [&](std::ostream& os) { write_trace(os, d); });
}

void Profiler::write_dot(std::ostream& os, DotOptions options) const { write_dot_graph(os, core().data(), options); }

void Profiler::write_dot(const std::string& path, DotOptions options) const {
  const ProfileData d = core().data();
  write_file(path, "write_dot", [&](std::ostream& os) { write_dot_graph(os, d, options); });
}

ProfileSummary Profiler::summary() const { return summarize(core().data()); }

std::uint64_t Profiler::dropped_events() const { return core().dropped(); }

void Profiler::clear() { core().clear(); }

}  // namespace ordo
