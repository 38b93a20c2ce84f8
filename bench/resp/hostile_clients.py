#!/usr/bin/env python3
# bench/resp/hostile_clients.py - issue 45's hostile-client cases against a
# RESP server, measured from outside: the server's RSS (/proc) and CPU time,
# and how long SIGTERM takes to end it.
#
#   hostile_clients.py KV_SERVER [--redis] [CASE...]   (--redis: redis-server beside it)
#
# Cases: stop (SIGTERM while a client does not read a 64 MiB reply), setex
# (RSS over 2M SET ... EX on one key), buffers (RSS after 20 connections each
# sent one 15 MB SET and the key was deleted), trickle (server CPU while 3
# clients send a 15.7 MB, 1M-element array in 64 KiB pieces), keyspace
# (DBSIZE and FLUSHALL over 1M keys). Prints one line per figure.
import os
import signal
import socket
import subprocess
import sys
import time


def req(*args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(kind, binary):
    if kind == "redis":
        port = free_port()
        p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL)
    else:
        p = subprocess.Popen([binary, "--resp", "--port", "0", "--threads", "2"], stdout=subprocess.PIPE, text=True)
        port = int(p.stdout.readline().split()[-1])
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return p, port
        except OSError:
            time.sleep(0.02)  # waiting for a child process to listen
    raise RuntimeError("server did not start")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def call(sock, *args):
    sock.sendall(req(*args))
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = sock.recv(65536)
        if not chunk:
            return data + b"(connection closed)"
        data += chunk
    return data


def stop_case(kind, binary):
    p, port = start(kind, binary)
    c = socket.create_connection(("127.0.0.1", port))
    call(c, "SET", "big", b"v" * (1 << 20))
    c.sendall(req("GET", "big") * 64)  # 64 MiB of replies, never read
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=60)
        took = time.monotonic() - t0
    except subprocess.TimeoutExpired:
        took = float("inf")
        p.kill()
        p.wait()
    c.close()
    print(f"{kind} stop: SIGTERM with a client not reading: exited after {took:.2f} s")


def setex_case(kind, binary):
    p, port = start(kind, binary)
    c = socket.create_connection(("127.0.0.1", port))
    before = rss_mib(p.pid)
    batch = req("SET", "k", "v", "EX", "1000") * 1000
    for _ in range(2000):
        c.sendall(batch)
        need = 5 * 1000
        got = 0
        while got < need:
            got += len(c.recv(1 << 20))
    print(f"{kind} setex: RSS {before:.0f} -> {rss_mib(p.pid):.0f} MiB over 2M SET ... EX on one key")
    p.terminate()
    p.wait()


def buffers_case(kind, binary):
    p, port = start(kind, binary)
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    value = b"x" * (15 << 20)
    for c in conns:
        call(c, "SET", "big", value)
    peak = rss_mib(p.pid)
    call(conns[0], "DEL", "big")
    time.sleep(5)  # Redis returns its buffers within seconds: the same wait for both
    print(f"{kind} buffers: RSS {peak:.0f} MiB with 20 x 15 MB SETs, {rss_mib(p.pid):.0f} MiB 5 s after DEL")
    p.terminate()
    p.wait()


def trickle_case(kind, binary):
    p, port = start(kind, binary)
    frame = req("EXISTS", *[b"k%d" % i for i in range(1000000 - 1)])
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    cpu0, t0 = cpu_s(p.pid), time.monotonic()
    piece = 64 << 10
    for at in range(0, len(frame), piece):
        for c in conns:
            c.sendall(frame[at:at + piece])
    for c in conns:
        c.settimeout(120)
        data = b""
        while not data.endswith(b"\r\n"):
            data += c.recv(65536)
    print(f"{kind} trickle: 3 x {len(frame) / 1e6:.1f} MB arrays in 64 KiB writes: "
          f"{cpu_s(p.pid) - cpu0:.2f} s server CPU in {time.monotonic() - t0:.2f} s")
    p.terminate()
    p.wait()


def keyspace_case(kind, binary):
    p, port = start(kind, binary)
    c = socket.create_connection(("127.0.0.1", port))
    for base in range(0, 1000000, 10000):
        args = ["MSET"]
        for i in range(base, base + 10000):
            args += [f"key:{i}", "v"]
        call(c, *args)
    for cmd in ("DBSIZE", "FLUSHALL", "DBSIZE"):
        t0 = time.monotonic()
        r = call(c, cmd)
        print(f"{kind} keyspace: {cmd} over 1M keys: {r.strip().decode()} in {1000 * (time.monotonic() - t0):.0f} ms")
        if cmd == "FLUSHALL" or b"closed" in r:
            break
    p.terminate()
    p.wait()


def main():
    binary = sys.argv[1]
    kinds = ["ordo"] + (["redis"] if "--redis" in sys.argv else [])
    names = [a for a in sys.argv[2:] if not a.startswith("--")]
    cases = (stop_case, setex_case, buffers_case, trickle_case, keyspace_case)
    for case in [c for c in cases if not names or c.__name__[:-5] in names]:
        for kind in kinds:
            case(kind, binary)


if __name__ == "__main__":
    main()
