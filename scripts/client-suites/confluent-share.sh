#!/usr/bin/env bash
# Runs confluent-kafka-python's own share consumer integration tests
# (tests/integration/share_consumer) against a floe agent, as they run
# against a Kafka 4.2 broker they bring up themselves: with the broker
# configs their fixture sets (1 s record locks) and BROKERS pointing at
# floe. The schema-registry tests (test_share_consumer_deserialization.py)
# need a registry and are left out.
#
#   scripts/client-suites/confluent-share.sh [CHECKOUT]
#
# CHECKOUT is a clone of confluentinc/confluent-kafka-python at the tag of
# the installed confluent-kafka (cloned into a temporary folder when not
# given: this needs GitHub). Needs a built `target/debug/floe` (or FLOE_BIN).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FLOE=${FLOE_BIN:-$ROOT/target/debug/floe}
WORK=$(mktemp -d)
trap 'kill "${AGENT:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT

CHECKOUT=${1:-}
if [ -z "$CHECKOUT" ]; then
    VERSION=$(python3 -c 'import confluent_kafka; print(confluent_kafka.version()[0])')
    CHECKOUT=$WORK/confluent-kafka-python
    git clone --quiet --depth 1 --branch "v$VERSION" \
        https://github.com/confluentinc/confluent-kafka-python "$CHECKOUT"
fi
python3 -m pip install --quiet trivup avro fastavro authlib httpx cachetools attrs \
    pytest pytest-timeout pytest-asyncio

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ADMIN=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$FLOE" agent --listen "127.0.0.1:$PORT" --admin-listen "127.0.0.1:$ADMIN" \
    --data-dir "$WORK/data" --object-store "file://$WORK/objects" --flush-interval 20ms \
    > "$WORK/agent.log" 2>&1 &
AGENT=$!
for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$ADMIN/healthz" > /dev/null && break
    sleep 0.1
done
# What their fixture sets on its broker (tests/common/__init__.py).
"$FLOE" configs alter --cluster --bootstrap-server "127.0.0.1:$PORT" \
    --config group.share.record.lock.duration.ms=1000 \
    --config group.share.min.record.lock.duration.ms=1000

# Their quota tests shell out to kafka-configs.sh for a client's quota:
# one that does it with `floe quotas`.
mkdir -p "$WORK/kafka/bin"
cat > "$WORK/kafka/bin/kafka-configs.sh" <<'SHIM'
#!/usr/bin/env bash
# kafka-configs.sh --bootstrap-server B --alter (--add-config K=V | --delete-config K)
#   --entity-type clients --entity-name C, as `floe quotas alter`.
set -euo pipefail
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bootstrap-server) args+=(--bootstrap-server "$2"); shift 2 ;;
        --add-config) IFS=, read -ra kvs <<< "$2"; for kv in "${kvs[@]}"; do args+=(--quota "$kv"); done; shift 2 ;;
        --delete-config) IFS=, read -ra ks <<< "$2"; for k in "${ks[@]}"; do args+=(--delete-quota "$k"); done; shift 2 ;;
        --entity-name) args+=(--client-id "$2"); shift 2 ;;
        --entity-type) shift 2 ;;
        --alter) shift ;;
        *) echo "kafka-configs.sh (floe's stand-in): $1 is not known" >&2; exit 2 ;;
    esac
done
exec "$FLOE_BIN" quotas alter "${args[@]}"
SHIM
chmod +x "$WORK/kafka/bin/kafka-configs.sh"

cd "$CHECKOUT"
FLOE_BIN="$FLOE" KAFKA_HOME="$WORK/kafka" BROKERS="127.0.0.1:$PORT" python3 -m pytest -p no:cacheprovider -q --timeout 120 -rfEs \
    tests/integration/share_consumer \
    --ignore tests/integration/share_consumer/test_share_consumer_deserialization.py \
    "${@:2}"
