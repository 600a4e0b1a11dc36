# What the benchmark scripts share; each sources it after setting OUT.
# Brokers started are added to `pids`; on exit they are stopped, and so is
# the S3 server started under "$OUT/s3" (localstack/start.sh).

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  jobs -p | xargs -r kill 2>/dev/null || true
  [ -f "$OUT/s3/started" ] && localstack/stop.sh "$OUT/s3" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Waits until something listens on 127.0.0.1:$1 (10 s at most).
wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $1" >&2
  return 1
}
