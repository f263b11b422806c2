#!/usr/bin/env bash
# prometheus-local.sh - a throwaway local Prometheus that scrapes rlrun's /metrics every second,
# to watch a run (idle fractions, tokens/s, memory) without a monitoring stack. No systemd needed.
#   scripts/prometheus-local.sh [host:port ...]   start (or restart with new targets); default
#                                                 target 127.0.0.1:9400 (metrics_bind's default)
#   scripts/prometheus-local.sh --stop            stop the Prometheus this script started
# Env: RLRUN_PROM_DIR (default /tmp/rlrun-prometheus: config, data, log, pid file),
#      RLRUN_PROM_PORT (default 9090; Prometheus listens on 127.0.0.1 only).
# Then open http://127.0.0.1:9090 and query e.g. rate(rlrun_trainer_idle_seconds_total[1m]).
# Needs Debian's `prometheus` package (scripts/install-deps.sh --test installs it).
set -euo pipefail
ROOT=${RLRUN_PROM_DIR:-/tmp/rlrun-prometheus}
PORT=${RLRUN_PROM_PORT:-9090}
PIDF=$ROOT/prometheus.pid

running() {
  [ -f "$PIDF" ] && [ -r "/proc/$(cat "$PIDF")/comm" ] && grep -qx prometheus "/proc/$(cat "$PIDF")/comm"
}
stop() {
  if running; then
    local pid n=0
    pid=$(cat "$PIDF")
    kill "$pid"
    while running && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    if running; then kill -9 "$pid"; fi
  fi
  rm -f "$PIDF"
}

if [ "${1:-}" = "--stop" ]; then stop; echo "prometheus-local: stopped"; exit 0; fi
if ! command -v prometheus >/dev/null; then
  echo "prometheus-local: no \`prometheus\` binary; install Debian's package: apt-get install prometheus" >&2
  exit 1
fi

TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(127.0.0.1:9400)
tlist=$(printf "'%s', " "${TARGETS[@]}")
tlist=${tlist%, }

mkdir -p "$ROOT/data"
cat > "$ROOT/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: rlrun
    static_configs:
      - targets: [$tlist]
EOF
stop
setsid nohup prometheus \
    --config.file="$ROOT/prometheus.yml" \
    --storage.tsdb.path="$ROOT/data" \
    --storage.tsdb.retention.time=1d \
    --web.listen-address="127.0.0.1:$PORT" \
    --log.level=warn \
    > "$ROOT/prometheus.log" 2>&1 < /dev/null &
echo $! > "$PIDF"

# Ready in well under a second; the first scrape follows ~5 s later (target discovery).
for _ in $(seq 1 100); do
  if ! running; then echo "prometheus-local: prometheus exited:" >&2; tail -20 "$ROOT/prometheus.log" >&2; exit 1; fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    echo "prometheus-local: http://127.0.0.1:$PORT scraping ${TARGETS[*]} (pid $(cat "$PIDF"), log $ROOT/prometheus.log)"
    exit 0
  fi
  sleep 0.1
done
echo "prometheus-local: prometheus did not listen on 127.0.0.1:$PORT within 10 s; see $ROOT/prometheus.log" >&2
exit 1
