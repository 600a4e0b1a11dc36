#!/usr/bin/env bash
# Starts a local S3-compatible server on 127.0.0.1, waits until it answers,
# and creates a bucket. Prints the endpoint URL.
#
#   localstack/start.sh [PORT] [BUCKET] [STATE_DIR]
#
# Stop it with localstack/stop.sh STATE_DIR.
set -euo pipefail
port=${1:-9000}
bucket=${2:-floe}
state=${3:-${TMPDIR:-/tmp}/floe-s3-$port}
mkdir -p "$state"
command -v moto_server >/dev/null || "$(dirname "$0")/install.sh"
moto_server -H 127.0.0.1 -p "$port" >"$state/server.log" 2>&1 &
echo $! >"$state/pid"
endpoint="http://127.0.0.1:$port"
for _ in $(seq 1 100); do
  if python3 - "$endpoint" "$bucket" <<'PY' 2>/dev/null; then
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
if sys.argv[2] not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
    s3.create_bucket(Bucket=sys.argv[2])
PY
    echo "$endpoint"
    exit 0
  fi
  sleep 0.1
done
echo "S3 server did not start; see $state/server.log" >&2
exit 1
