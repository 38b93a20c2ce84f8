#!/usr/bin/env python3
"""Merges the Chrome / Perfetto traces of an ordo::dist job, one per rank,
into one trace with an arrow per transfer between ranks.

    ORDO_PROFILE=trace.json mpirun -np 4 ./my_program   # trace.rank0.json ... trace.rank3.json
    scripts/merge_traces.py merged.json trace.rank*.json
    # open merged.json in ui.perfetto.dev

Each rank's processes become "rank R: <process>"; its times are moved onto
one time line by the traces' otherData.clock_origin_ns (the ranks' steady
clocks: comparable on one machine, not across machines). A send slice on
rank A (peer B, variable v, transfer number k) is joined to the receive
slice on rank B (peer A, v, k) by a flow arrow "transfer", from the send's
end to the receive's end (the value arrived). Prints what it joined on
stderr; exits 1 if an input is not an ordo trace.
"""
import json
import re
import sys

PID_STRIDE = 100  # rank R's process p becomes (R + 1) * PID_STRIDE + p
FLOW_STRIDE = 1_000_000_000  # and its flow ids R * FLOW_STRIDE + id


def rank_of(path, doc, index):
    for ev in doc["traceEvents"]:
        if ev.get("ph") == "X" and ev.get("cat") == "transfer":
            m = re.fullmatch(r"rank (\d+)", ev["args"].get("track", ""))
            if m:
                return int(m.group(1))
    m = re.search(r"\.rank(\d+)\.", path)
    return int(m.group(1)) if m else index


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out_path, inputs = argv[1], argv[2:]
    docs = []
    for i, path in enumerate(inputs):
        with open(path) as f:
            doc = json.load(f)
        if doc.get("otherData", {}).get("producer") != "ordo":
            print(f"merge_traces: {path} is not an ordo trace (otherData.producer)", file=sys.stderr)
            return 1
        docs.append((rank_of(path, doc, i), path, doc))
    origin = min(d["otherData"].get("clock_origin_ns", 0) for _, _, d in docs)

    events = []
    sends, recvs = {}, {}
    for rank, _, doc in docs:
        shift_us = (doc["otherData"].get("clock_origin_ns", 0) - origin) / 1000.0
        for ev in doc["traceEvents"]:
            ev = dict(ev)
            ev["pid"] = (rank + 1) * PID_STRIDE + ev["pid"]
            if "ts" in ev:
                ev["ts"] = round(ev["ts"] + shift_us, 3)
            if ev.get("ph") in ("s", "f"):
                ev["id"] = rank * FLOW_STRIDE + ev["id"]
            if ev.get("ph") == "M" and ev.get("name") == "process_name":
                ev["args"] = {"name": f"rank {rank}: {ev['args']['name']}"}
            if ev.get("ph") == "X" and ev.get("cat") == "transfer":
                a = ev["args"]
                if ev["name"] == "send":
                    sends[(rank, a["peer"], a["var"], a["key"])] = ev
                elif ev["name"] == "recv":
                    recvs[(a["peer"], rank, a["var"], a["key"])] = ev
            events.append(ev)

    def end(ev):
        return round(max(ev["ts"], ev["ts"] + ev["dur"] - 0.001), 3)

    flow = len(docs) * FLOW_STRIDE
    matched = 0
    for key, s in sorted(sends.items()):
        r = recvs.get(key)
        if r is None:
            continue
        matched += 1
        flow += 1
        args = {"from_rank": key[0], "to_rank": key[1], "var": key[2], "key": key[3], "bytes": s["args"]["bytes"]}
        events.append({"ph": "s", "cat": "transfer", "name": "transfer", "id": flow, "pid": s["pid"],
                       "tid": s["tid"], "ts": end(s), "args": args})
        events.append({"ph": "f", "bp": "e", "cat": "transfer", "name": "transfer", "id": flow, "pid": r["pid"],
                       "tid": r["tid"], "ts": end(r), "args": args})
    unmatched = len(sends) + len(recvs) - 2 * matched
    merged = {
        "displayTimeUnit": "ns",
        "otherData": {"producer": "ordo merge_traces", "ranks": len(docs), "transfers": matched,
                      "unmatched_transfer_slices": unmatched},
        "traceEvents": events,
    }
    with open(out_path, "w") as f:
        json.dump(merged, f)
    print(f"merge_traces: {len(docs)} ranks, {matched} transfers joined, {unmatched} slices without their other end",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
