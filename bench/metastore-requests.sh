#!/usr/bin/env bash
# Metastore requests per agent-second while records flow: three agents on
# one `floe metastore` node and one local bucket, each with its own
# `floe bench` (a topic of 8 partitions, RATE/3 records/s of 1 KiB, two
# subscriptions of one consumer: six tailing consumers in all). Prints each
# agent's requests a second by operation over DURATION after WARMUP, and
# the average besides commits (`IngestCommit`), and the messages of the
# agents' subscriptions to pushed changes (READ_LEASE, the node's
# `--read-lease`: 2s by default, 0s for none, so agents ask with rounds).
#
#   bench/metastore-requests.sh
#   RATE=3000 DURATION=30 bench/metastore-requests.sh
#   READ_LEASE=0s bench/metastore-requests.sh
set -euo pipefail
cd "$(dirname "$0")/.."

RATE=${RATE:-3000}
WARMUP=${WARMUP:-10}
DURATION=${DURATION:-30}
READ_LEASE=${READ_LEASE:-2s}
OUT=${OUT:-${TMPDIR:-/tmp}/floe-metastore-requests}
META_PORT=19301

cargo build --release --quiet -p floe
FLOE=$PWD/target/release/floe
rm -rf "$OUT" && mkdir -p "$OUT"
# shellcheck source=bench/lib.sh
. bench/lib.sh

"$FLOE" metastore --id 1 --listen 127.0.0.1:$META_PORT --path "$OUT/meta/meta.redb" \
  --read-lease "$READ_LEASE" \
  >"$OUT/metastore.log" 2>&1 &
pids+=($!)
wait_port $META_PORT

for i in 0 1 2; do
  mkdir -p "$OUT/agent$i"
  "$FLOE" agent --data-dir "$OUT/agent$i" --listen 127.0.0.1:1909$i \
    --admin-listen 127.0.0.1:1964$i --metastore 127.0.0.1:$META_PORT \
    --object-store "file://$OUT/objects" \
    --discovery load-balancer --advertise 127.0.0.1:1909$i >"$OUT/agent$i.log" 2>&1 &
  pids+=($!)
done
for i in 0 1 2; do wait_port 1964$i; wait_port 1909$i; done

benches=()
for i in 0 1 2; do
  "$FLOE" bench --bootstrap 127.0.0.1:1909$i --topic-prefix "requests$i" \
    --rate $((RATE / 3)) --subscriptions 2 --warmup "$((WARMUP + 5))s" \
    --duration "$((DURATION + 5))s" --progress 0s >"$OUT/bench$i.txt" 2>&1 &
  benches+=($!)
done

scrape() { # file
  for i in 0 1 2; do
    curl -s "127.0.0.1:1964$i/metrics" | awk -v agent=$i \
      '/^floe_metastore_requests_total\{/ { print agent, "request", $1, $2 }
       /^floe_metastore_stream_messages_total\{/ { print agent, "stream", $1, $2 }'
  done >"$1"
}
sleep "$((WARMUP + 3))"
scrape "$OUT/before"
sleep "$DURATION"
scrape "$OUT/after"
for b in "${benches[@]}"; do wait "$b" || true; done

awk -v seconds="$DURATION" '
  NR == FNR { before[$1 " " $3] = $4; next }
  {
    rate = ($4 - before[$1 " " $3]) / seconds
    op = $3; sub(/.*op="/, "", op); sub(/".*/, "", op)
    agents[$1] = 1
    if ($2 == "request") {
      per[$1] += (op == "IngestCommit") ? 0 : rate
      printf "agent %s %-28s %7.2f/s\n", $1, op, rate
    } else {
      streamed[$1] += rate
      printf "agent %s stream %-21s %7.2f/s\n", $1, op, rate
    }
  }
  END {
    for (a in agents) { total += per[a]; messages += streamed[a]; n++ }
    printf "besides commits: %.1f requests per agent-second\n", total / n
    printf "on the subscription stream: %.1f messages per agent-second\n", messages / n
  }' "$OUT/before" "$OUT/after" | sort
grep -h "^produce \|^consume " "$OUT"/bench*.txt
