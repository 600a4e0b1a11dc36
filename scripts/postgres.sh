#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests: installs Debian's package if
# the server is missing, makes a cluster in DIR (owned by the `postgres`
# user when run as root, as the server refuses to run as root) and starts
# it on 127.0.0.1:PORT with trust authentication for the user `floe`.
#
#   scripts/postgres.sh start DIR PORT   # prints the URL to connect to
#   scripts/postgres.sh stop DIR
set -euo pipefail

bin_dir() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$found" ]; then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    else
      sudo apt-get update -qq >&2
      sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    fi
    found=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  echo "$found"
}

# Runs a server command as the user that owns the cluster.
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-}" in
  start)
    dir=$2 port=$3
    bin=$(bin_dir)
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
    if [ ! -f "$dir/PG_VERSION" ]; then
      as_owner "$bin/initdb" -D "$dir" -A trust -U floe >/dev/null
    fi
    as_owner "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1" start >/dev/null
    echo "postgres://floe@127.0.0.1:$port/postgres"
    ;;
  stop)
    dir=$2
    as_owner "$(bin_dir)/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
    ;;
  *)
    echo "usage: $0 start DIR PORT | stop DIR" >&2
    exit 2
    ;;
esac
