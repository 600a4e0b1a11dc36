#!/usr/bin/env bash
# Starts a local S3-compatible server on 127.0.0.1, waits until it answers,
# and creates a bucket. Prints the endpoint URL on stdout and the keys to use
# on stderr.
#
#   localstack/start.sh [--server moto|minio|localstack|rustfs] [PORT] [BUCKET] [STATE_DIR]
#
#   moto        (default; what CI uses) from PyPI, objects in memory.
#   minio       a `minio` binary on PATH, else Docker's minio/minio image.
#   localstack  its `localstack` CLI, else Docker's localstack/localstack
#               image; needs LOCALSTACK_AUTH_TOKEN (current releases refuse
#               to start without one).
#   rustfs      a `rustfs` binary on PATH or in ~/.cache/floe-peers/rustfs;
#               with FLOE_INSTALL_RUSTFS=1 it is built there with cargo (long).
#
# Stop it with localstack/stop.sh STATE_DIR.
set -euo pipefail
server=moto
if [ "${1:-}" = "--server" ]; then
  server=${2:?--server needs a name}
  shift 2
fi
port=${1:-9000}
bucket=${2:-floe}
state=${3:-${TMPDIR:-/tmp}/floe-s3-$port}
mkdir -p "$state"
here=$(cd "$(dirname "$0")" && pwd)
endpoint="http://127.0.0.1:$port"
key=test
secret=test

docker_runs() { command -v docker >/dev/null && docker info >/dev/null 2>&1; }
python3 -c 'import boto3' 2>/dev/null || "$here/install.sh"
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  echo "port $port is taken: something already answers there" >&2
  exit 1
fi
# Whatever fails from here on, the server started is stopped.
trap '"$here/stop.sh" "$state"' ERR INT TERM

case "$server" in
  moto)
    command -v moto_server >/dev/null || "$here/install.sh"
    moto_server -H 127.0.0.1 -p "$port" >"$state/server.log" 2>&1 &
    echo "pid $!" >"$state/started"
    ;;
  minio)
    # MinIO wants a secret of 8 characters or more.
    key=floe-test secret=floe-test-secret
    if command -v minio >/dev/null; then
      MINIO_ROOT_USER=$key MINIO_ROOT_PASSWORD=$secret \
        minio server --address "127.0.0.1:$port" --console-address 127.0.0.1:0 "$state/data" \
        >"$state/server.log" 2>&1 &
      echo "pid $!" >"$state/started"
    elif docker_runs; then
      id=$(docker run -d --rm -p "127.0.0.1:$port:9000" -e MINIO_ROOT_USER=$key \
        -e MINIO_ROOT_PASSWORD=$secret minio/minio server /data)
      echo "container $id" >"$state/started"
    else
      echo "minio: no minio binary on PATH and no Docker daemon (PyPI and npm have only clients)" >&2
      exit 1
    fi
    ;;
  localstack)
    : "${LOCALSTACK_AUTH_TOKEN:?localstack: set LOCALSTACK_AUTH_TOKEN (current releases refuse to start without it)}"
    if command -v localstack >/dev/null; then
      GATEWAY_LISTEN="127.0.0.1:$port" localstack start -d >"$state/server.log" 2>&1
      echo "localstack" >"$state/started"
    elif docker_runs; then
      id=$(docker run -d --rm -p "127.0.0.1:$port:4566" -e LOCALSTACK_AUTH_TOKEN localstack/localstack)
      echo "container $id" >"$state/started"
    else
      echo "localstack: no localstack CLI and no Docker daemon" >&2
      exit 1
    fi
    ;;
  rustfs)
    key=floe-test secret=floe-test-secret
    cached="$HOME/.cache/floe-peers/rustfs"
    binary=$(command -v rustfs || echo "$cached/bin/rustfs")
    if [ ! -x "$binary" ]; then
      if [ "${FLOE_INSTALL_RUSTFS:-}" != 1 ]; then
        echo "rustfs: not on PATH nor in $cached; FLOE_INSTALL_RUSTFS=1 builds it there (cargo install rustfs, long)" >&2
        exit 1
      fi
      # rustfs 1.0 declares rustc 1.98.1; 1.0.1 built here with a 1.97
      # nightly (a debug build: about 75 minutes on 2 cores; needs protoc).
      toolchain=
      if command -v rustup >/dev/null && rustup toolchain list | grep -q '^nightly'; then
        toolchain=+nightly
      fi
      cargo $toolchain install rustfs@1.0.1 --locked --ignore-rust-version --debug \
        --root "$cached" >&2
    fi
    mkdir -p "$state/data"
    RUSTFS_ACCESS_KEY=$key RUSTFS_SECRET_KEY=$secret RUSTFS_CONSOLE_ENABLE=false \
      "$binary" server --address "127.0.0.1:$port" "$state/data" >"$state/server.log" 2>&1 &
    echo "pid $!" >"$state/started"
    ;;
  *)
    echo "unknown server '$server' (moto, minio, localstack or rustfs)" >&2
    exit 2
    ;;
esac

read -r kind what <"$state/started"
deadline=$((SECONDS + 60))
while [ "$SECONDS" -lt "$deadline" ]; do
  # A server that died (its port taken, say) is not waited for; another
  # one answering on that port is not taken for it.
  if [ "$kind" = pid ] && ! kill -0 "$what" 2>/dev/null; then
    break
  fi
  if python3 - "$endpoint" "$bucket" "$key" "$secret" <<'PY' 2>/dev/null; then
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  aws_access_key_id=sys.argv[3], aws_secret_access_key=sys.argv[4])
if sys.argv[2] not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
    s3.create_bucket(Bucket=sys.argv[2])
PY
    trap - ERR INT TERM
    echo "$endpoint"
    echo "$server: AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret" >&2
    exit 0
  fi
  sleep 0.2
done
echo "$server did not start (or answer) within a minute; see $state/server.log" >&2
"$here/stop.sh" "$state"
exit 1
