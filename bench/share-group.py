#!/usr/bin/env python3
"""One share group (KIP-932) under a steady load, with librdkafka's share
consumer: N members of one group on a topic of P partitions while a
producer writes R records/s. Starts its own `floe metastore` node and one
`floe agent` on it (so the agent counts its metastore requests), and
prints throughput, delivery latency (produce time to receipt), records
delivered more than once, and metastore requests per 1,000 records by
operation.

    bench/share-group.py [--rate 20000] [--consumers 8] [--partitions 16]
                         [--seconds 60] [--floe target/release/floe]
"""

import argparse
import os
import pathlib
import re
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = pathlib.Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metastore_requests(admin_port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=10).read().decode()
    counts = {}
    for m in re.finditer(r'^floe_metastore_requests_total\{op="([^"]+)"\} (\S+)$', text, re.M):
        counts[m.group(1)] = float(m.group(2))
    return counts


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=20_000, help="records per second produced")
    ap.add_argument("--consumers", type=int, default=8)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--floe", default=os.environ.get("FLOE_BIN", str(ROOT / "target" / "release" / "floe")))
    args = ap.parse_args()

    work = pathlib.Path(tempfile.mkdtemp(prefix="floe-share-bench-"))
    meta_port, kafka_port, admin_port = free_port(), free_port(), free_port()
    meta = subprocess.Popen([args.floe, "metastore", "--id", "1", "--listen", f"127.0.0.1:{meta_port}",
                             "--path", str(work / "meta.redb")],
                            stdout=open(work / "meta.log", "w"), stderr=subprocess.STDOUT)
    agent = subprocess.Popen([args.floe, "agent", "--listen", f"127.0.0.1:{kafka_port}",
                              "--admin-listen", f"127.0.0.1:{admin_port}",
                              "--data-dir", str(work / "data"), "--object-store", f"file://{work / 'objects'}",
                              "--metastore", f"127.0.0.1:{meta_port}"],
                             stdout=open(work / "agent.log", "w"), stderr=subprocess.STDOUT)
    bootstrap = f"127.0.0.1:{kafka_port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("share-bench", args.partitions, 1)])["share-bench"].result(30)
        run(args, bootstrap, admin_port, agent.pid)
    finally:
        agent.terminate()
        meta.terminate()
        agent.wait(30)
        meta.wait(30)


def run(args, bootstrap, admin_port, agent_pid):
    stop = threading.Event()
    lock = threading.Lock()
    latencies, seen, redelivered, duplicates = [], set(), [0], [0]

    def member():
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "share-bench",
                           "fetch.wait.max.ms": 100})
        c.subscribe(["share-bench"])
        while not stop.is_set():
            batch = c.poll(0.2) or []
            now = time.time_ns()
            with lock:
                for m in batch:
                    if m.error():
                        continue
                    sent_ns, key = m.value()[:19], (m.partition(), m.offset())
                    latencies.append((now - int(sent_ns)) / 1e6)
                    if m.delivery_count() > 1:
                        redelivered[0] += 1
                    if key in seen:
                        duplicates[0] += 1
                    seen.add(key)
        c.close()

    members = [threading.Thread(target=member, daemon=True) for _ in range(args.consumers)]
    for t in members:
        t.start()
    time.sleep(8)  # members join and are assigned (share groups start at the latest record)
    before, cpu_before = metastore_requests(admin_port), cpu_seconds(agent_pid)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    pad = b"x" * max(0, args.record_bytes - 20)
    produced, began = 0, time.time()
    while time.time() - began < args.seconds:
        due = int((time.time() - began) * args.rate)
        while produced < due:
            producer.produce("share-bench", value=b"%019d:" % time.time_ns() + pad,
                             partition=produced % args.partitions)
            produced += 1
            if produced % 1000 == 0:
                producer.poll(0)
        time.sleep(0.001)
    producer.flush(60)
    produced_for = time.time() - began
    deadline = time.time() + 60
    while time.time() < deadline and len(seen) < produced:
        time.sleep(0.2)
    stop.set()
    for t in members:
        t.join(30)
    after, cpu_after = metastore_requests(admin_port), cpu_seconds(agent_pid)
    with lock:
        lat = sorted(latencies)
        got = len(seen)
    print(f"share group: {args.consumers} members, {args.partitions} partitions, "
          f"{args.rate} records/s asked for {args.seconds} s")
    print(f"produced {produced} records ({produced / produced_for:.0f}/s); delivered {got} "
          f"({'all' if got >= produced else f'{produced - got} missing'}), "
          f"{redelivered[0]} redelivered, {duplicates[0]} duplicates")
    print(f"delivery latency ms: p50 {percentile(lat, 0.5):.0f}  p99 {percentile(lat, 0.99):.0f}  "
          f"max {lat[-1] if lat else float('nan'):.0f}")
    print(f"agent CPU: {cpu_after - cpu_before:.1f} s")
    ops = {op: after.get(op, 0) - before.get(op, 0) for op in after}
    per_k = {op: n * 1000 / max(got, 1) for op, n in ops.items() if n}
    print("metastore requests per 1,000 records: " + ", ".join(
        f"{op} {v:.1f}" for op, v in sorted(per_k.items(), key=lambda kv: -kv[1])))
    print(f"  of which share operations: {sum(v for op, v in per_k.items() if 'share' in op.lower()):.1f}")


if __name__ == "__main__":
    main()
