#!/usr/bin/env bash
# Installs everything the tests need, from the package registries only, then
# runs the whole suite: formatting, lints, unit, property and simulation
# tests, and the integration tests with real Kafka clients (kcat,
# kafka-python, confluent-kafka, kafkajs) against real `floe agent`
# processes, on a local folder and on a local S3-compatible server, alone
# and as clusters behind HAProxy, with the metastore in Raft and in
# PostgreSQL; the container image, the deployment files
# (compose, Kubernetes, systemd) run as written, and the docs book.
#
#   ./scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

step "system packages (kcat, haproxy, buildah and podman, systemd-analyze, promtool)"
# buildah builds the container image in its test and podman exports it
# (no container runs: the test runs the image's filesystem with chroot);
# promtool (Debian's prometheus) checks the alert rules.
if ! command -v kcat >/dev/null || ! command -v haproxy >/dev/null \
    || ! command -v buildah >/dev/null || ! command -v podman >/dev/null \
    || ! command -v systemd-analyze >/dev/null || ! command -v promtool >/dev/null; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    kcat haproxy buildah podman systemd
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    prometheus
fi

step "python clients"
python3 -m pip install -q --disable-pip-version-check -r tests/requirements.txt

step "local S3-compatible server (moto)"
./localstack/install.sh

step "docs tools (mdBook)"
if ! command -v mdbook >/dev/null && [ ! -x "$HOME/.cargo/bin/mdbook" ]; then
  cargo install --locked --quiet mdbook --version 0.5.4 --no-default-features --features search
fi

step "node clients"
(cd tests/node && npm install --no-audit --no-fund --silent)

# A one-off build gains nothing from incremental caches; they double the size
# of target/ on a clean clone.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

step "PostgreSQL (the metastore's PostgreSQL backend is tested against it)"
# A throwaway server for the Rust tests; the integration tests start their own.
pg_dir=$(mktemp -d /tmp/floe-pg-XXXXXX)
trap './scripts/postgres.sh stop "$pg_dir" || true' EXIT
FLOE_TEST_POSTGRES=$(./scripts/postgres.sh start "$pg_dir" "${FLOE_TEST_POSTGRES_PORT:-55439}")
# Tests that need the server fail rather than skip when it is missing.
export FLOE_TEST_POSTGRES FLOE_REQUIRE_POSTGRES=1

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The agent's rooms import one another without a cycle.
python3 scripts/rooms.py > /dev/null

step "unit and property tests"
cargo build --workspace --quiet
cargo test --workspace --quiet

step "integration tests with real clients"
python3 -m pytest -p no:cacheprovider -W ignore::DeprecationWarning tests
