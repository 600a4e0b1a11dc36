#!/usr/bin/env bash
# One `floe bench` workload against floe and against Tansu (crates.io
# `tansu`, renamed Nisshi upstream), on this machine, on a local store and
# on a local S3-compatible server (moto), one broker at a time so none
# shares the cores with another. Prints each run's summary and the ratios.
#
#   bench/side-by-side.sh                      # both workloads below
#   TANSU=/path/to/tansu DURATION=300s bench/side-by-side.sh
#
# Two workloads, 8 partitions of 1 KiB records, one producer and one
# consumer: a fixed rate (RATE records/s, default 5,000, for DURATION: latency
# at a load both brokers carry) and full speed (for DURATION_FULL, default
# 15 s: throughput, CPU per GiB). Tansu's memory engine keeps every record in
# memory (it took 500 MiB/s here, 30 GiB a minute), so a broker whose
# resident memory passes MAX_RSS_GIB (default 8) is stopped and its run
# counts as failed.
#
# Tansu is not built by this script: it compiles for about half an hour on
# two cores (longer with other work). Build it once, outside the repository:
#
#   cargo install tansu --version 0.6.0 --features dynostore --root ~/.cache/floe-peers/tansu
set -euo pipefail
cd "$(dirname "$0")/.."

TANSU=${TANSU:-$HOME/.cache/floe-peers/tansu/bin/tansu}
DURATION=${DURATION:-60s}
WARMUP=${WARMUP:-10s}
DURATION_FULL=${DURATION_FULL:-15s}
WARMUP_FULL=${WARMUP_FULL:-5s}
MAX_RSS_GIB=${MAX_RSS_GIB:-8}
RATE=${RATE:-5000}
OUT=${OUT:-${TMPDIR:-/tmp}/floe-side-by-side}
STORES=${STORES:-"local s3"}
FLOE_PORT=19092 FLOE_ADMIN=19644 TANSU_PORT=29092 S3_PORT=19000

[ -x "$TANSU" ] || { echo "no Tansu binary at $TANSU (see this script's header)" >&2; exit 1; }
cargo build --release --quiet -p floe
FLOE=$PWD/target/release/floe
rm -rf "$OUT" && mkdir -p "$OUT"

# shellcheck source=bench/lib.sh
. bench/lib.sh

# Stops process $1 if its resident memory passes MAX_RSS_GIB.
guard_memory() {
  local pid=$1 limit=$((MAX_RSS_GIB * 1024 * 1024)) rss
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    if [ "${rss:-0}" -gt "$limit" ]; then
      echo "stopping $pid: resident memory ${rss} KiB passed ${MAX_RSS_GIB} GiB" >&2
      kill "$pid" 2>/dev/null || true
    fi
    sleep 0.5
  done
}

stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

bench() { # label port pid json duration warmup [extra args...]
  local label=$1 port=$2 pid=$3 json=$4 duration=$5 warmup=$6
  shift 6
  guard_memory "$pid" &
  "$FLOE" bench --bootstrap "127.0.0.1:$port" --label "$label" --broker-pid "$pid" \
    --duration "$duration" --warmup "$warmup" --json "$json" --plot "${json%.json}.svg" \
    --progress 10s "$@"
}

for store in $STORES; do
  s3=""
  if [ "$store" = s3 ]; then
    s3=$(localstack/start.sh "$S3_PORT" floe "$OUT/s3")
    python3 - "$s3" <<'PY'
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
s3.create_bucket(Bucket="tansu")
PY
  fi
  for workload in rate full; do
    rate=$RATE duration=$DURATION warmup=$WARMUP
    if [ "$workload" = full ]; then
      rate=0 duration=$DURATION_FULL warmup=$WARMUP_FULL
    fi

    # floe: one agent with its in-process metastore, as `floe agent` starts.
    dir="$OUT/floe-$store-$workload"
    mkdir -p "$dir"
    store_url="file://$dir/objects"
    [ -n "$s3" ] && store_url="s3://floe/$workload?endpoint=$s3&region=us-east-1&path_style=true"
    AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test \
      "$FLOE" agent --listen "127.0.0.1:$FLOE_PORT" --advertise "127.0.0.1:$FLOE_PORT" \
      --admin-listen "127.0.0.1:$FLOE_ADMIN" --data-dir "$dir/data" --object-store "$store_url" \
      >"$dir/agent.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_port "$FLOE_PORT"
    bench "floe-$store" "$FLOE_PORT" "$pid" "$OUT/floe-$store-$workload.json" "$duration" \
      "$warmup" --rate "$rate" --metrics-url "http://127.0.0.1:$FLOE_ADMIN/metrics" \
      || echo "(the floe run failed; see $dir/agent.log)"
    stop "$pid"

    # Tansu: its memory engine for the local store, its S3 engine (dynostore) on the same server.
    engine="memory://tansu/"
    [ -n "$s3" ] && engine="s3://tansu/"
    AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 \
      AWS_REGION=us-east-1 AWS_ENDPOINT="$s3" AWS_ALLOW_HTTP=true \
      "$TANSU" broker --listener-url "tcp://127.0.0.1:$TANSU_PORT" \
      --advertised-listener-url "tcp://127.0.0.1:$TANSU_PORT" --storage-engine "$engine" \
      >"$OUT/tansu-$store-$workload.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_port "$TANSU_PORT"
    bench "tansu-$store" "$TANSU_PORT" "$pid" "$OUT/tansu-$store-$workload.json" "$duration" \
      "$warmup" --rate "$rate" \
      || echo "(the Tansu run failed; see $OUT/tansu-$store-$workload.log)"
    stop "$pid"
  done
  [ -n "$s3" ] && localstack/stop.sh "$OUT/s3" >/dev/null
done

echo
for store in $STORES; do
  for workload in rate full; do
    a="$OUT/floe-$store-$workload.json" b="$OUT/tansu-$store-$workload.json"
    [ -f "$a" ] && [ -f "$b" ] || continue
    echo "== $store store, $workload"
    "$FLOE" bench --compare "$a" "$b"
  done
done
echo "reports and plots: $OUT"
