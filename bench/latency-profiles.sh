#!/usr/bin/env bash
# Produce and end-to-end latency of one floe agent on a local S3-compatible
# server (moto) whose every HTTP request is delayed as S3 Standard's or S3
# Express One Zone's would be (`--inject-faults latency_p50=..,latency_p99=..`),
# at a fixed rate, one run at a time on this machine. Prints each run's
# summary; reports and plots go to OUT.
#
#   bench/latency-profiles.sh
#   RATE=20000 DURATION=120s bench/latency-profiles.sh
#   FLOE=/path/to/another/floe bench/latency-profiles.sh   # a build to compare
#
# The profiles (PROFILES, name:delays:agent flags, space separated):
#
#   standard  S3 Standard, AWS's guidance ("typical latencies of 100-200 ms"):
#             p50 100 ms, p99 200 ms; floe's defaults (250 ms flush).
#   express   S3 Express One Zone ("consistent single-digit millisecond"):
#             p50 5 ms, p99 10 ms; a 50 ms flush, as its cheaper requests allow.
#
# The delays are drawn per request (log-normal through p50 and p99) by the
# agent's S3 client, so moto's own time comes on top (about a millisecond here).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-60s}
WARMUP=${WARMUP:-10s}
RATE=${RATE:-5000}
OUT=${OUT:-${TMPDIR:-/tmp}/floe-latency-profiles}
PROFILES=${PROFILES:-"standard:latency_p50=100ms,latency_p99=200ms: express:latency_p50=5ms,latency_p99=10ms:--flush-interval=50ms"}
FLOE_PORT=19092 FLOE_ADMIN=19644 S3_PORT=19000

if [ -z "${FLOE:-}" ]; then
  cargo build --release --quiet -p floe
  FLOE=$PWD/target/release/floe
fi
rm -rf "$OUT" && mkdir -p "$OUT"

# shellcheck source=bench/lib.sh
. bench/lib.sh

s3=$(localstack/start.sh "$S3_PORT" floe "$OUT/s3")
for profile in $PROFILES; do
  IFS=: read -r name delays flags <<<"$profile"
  dir="$OUT/$name"
  mkdir -p "$dir"
  # shellcheck disable=SC2086 # flags are words
  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test \
    "$FLOE" agent --listen "127.0.0.1:$FLOE_PORT" --advertise "127.0.0.1:$FLOE_PORT" \
    --admin-listen "127.0.0.1:$FLOE_ADMIN" --data-dir "$dir/data" \
    --object-store "s3://floe/$name?endpoint=$s3&region=us-east-1&path_style=true" \
    --inject-faults "$delays" $flags >"$dir/agent.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  wait_port "$FLOE_PORT"
  echo "== $name: $delays $flags"
  "$FLOE" bench --bootstrap "127.0.0.1:$FLOE_PORT" --label "floe-s3-$name" --broker-pid "$pid" \
    --duration "$DURATION" --warmup "$WARMUP" --rate "$RATE" \
    --metrics-url "http://127.0.0.1:$FLOE_ADMIN/metrics" \
    --json "$OUT/$name.json" --plot "$OUT/$name.svg" --progress 0s \
    || echo "(the run failed; see $dir/agent.log)"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
done
echo "reports and plots: $OUT"
