#!/usr/bin/env bash
# Reports/s into a ClickHouse cluster through two collectors, and whether anything was lost.
#
#   scripts/cluster-bench.sh [--shards N] [--flows F] [--duration S] [--no-store] RATE...
#
# For each RATE (reports/s offered to EACH collector): starts N ClickHouse shards (default 2) and
# two release `intscope collect --store clickhouse:...` processes on loopback, blasts RATE
# reports/s of Report v2.0 (8 per datagram, F flows, default 10 000) at each for S seconds
# (default 5), waits until every datagram is accounted for, stops the collectors (SIGTERM: their
# final flush) and reads the fabric's stored counters through `intscope serve`. One JSON line per
# rate: sent, stored (reports_v2 in the store), kernel drops, discards, ingest pauses, and
# whether sent = stored + counted losses. Needs `cargo build --release -p intscope`, curl and
# clickhouse-server. With --no-store the collectors keep no history (the same run without the
# store, to compare): "stored" is then what the collectors decoded.
set -euo pipefail
cd "$(dirname "$0")/.."

shards=2
flows=10000
duration=5
nostore=0
rates=()
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) shards="$2"; shift 2 ;;
    --flows) flows="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --no-store) nostore=1; shift ;;
    *) rates+=("$1"); shift ;;
  esac
done
[ ${#rates[@]} -gt 0 ] || { sed -n '2,13p' "$0"; exit 2; }
bin=target/release/intscope
[ -x "$bin" ] || { echo "build first: cargo build --release -p intscope" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  scripts/clickhouse.sh stop "$work/ch" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

port=$((21000 + RANDOM % 5000))
for rate in "${rates[@]}"; do
  scripts/clickhouse.sh stop "$work/ch" >/dev/null 2>&1 || true
  rm -rf "$work/ch"
  scripts/clickhouse.sh start "$work/ch" --shards "$shards" --port "$port" >/dev/null
  urls=$(for i in $(seq 0 $((shards - 1))); do echo "http://127.0.0.1:$((port + i))"; done | paste -sd, -)
  https=() udps=() cpids=()
  for c in 1 2; do
    if [ "$nostore" = 1 ]; then store=(--no-store); else store=(--store "clickhouse:$urls"); fi
    "$bin" collect --listen 127.0.0.1:0 --http 127.0.0.1:0 "${store[@]}" \
      --collector-name "c$c" >"$work/c$c.out" 2>"$work/c$c.err" &
    cpids+=($!)
    pids+=($!)
  done
  for c in 1 2; do
    for _ in $(seq 1 100); do [ -s "$work/c$c.out" ] && break; sleep 0.1; done
    https+=("$(sed -n 's/.*"http":"\([^"]*\)".*/\1/p' "$work/c$c.out")")
    udps+=("$(sed -n 's/.*"listen":\["\([^"]*\)".*/\1/p' "$work/c$c.out")")
  done
  start=$(date +%s.%N)
  "$bin" blast --to "${udps[0]}" --rate "$rate" --duration "$duration" --flows "$flows" >"$work/b1" &
  b1=$!
  "$bin" blast --to "${udps[1]}" --rate "$rate" --duration "$duration" --flows "$flows" >"$work/b2"
  wait "$b1"
  load=$(cut -d' ' -f1 /proc/loadavg)
  sent_reports=0
  sent_dgrams=()
  for b in b1 b2; do
    r=$(sed -n 's/.*"reports":\([0-9]*\).*/\1/p' "$work/$b")
    d=$(sed -n 's/.*"datagrams":\([0-9]*\).*/\1/p' "$work/$b")
    sent_reports=$((sent_reports + r))
    sent_dgrams+=("$d")
  done
  kernel=0 discards=0 pauses=0 decoded=0
  for c in 0 1; do
    for _ in $(seq 1 300); do
      s=$(curl -s "http://${https[$c]}/api/stats")
      got=$(echo "$s" | sed -n 's/.*"datagrams_received":\([0-9]*\).*/\1/p')
      kd=$(echo "$s" | sed -n 's/.*"kernel_dropped":\([0-9]*\).*/\1/p')
      [ $((got + ${kd:-0})) -ge "${sent_dgrams[$c]}" ] && break
      sleep 0.1
    done
    kernel=$((kernel + ${kd:-0}))
    mal=$(echo "$s" | sed -n 's/.*"malformed":\([0-9]*\).*/\1/p')
    na=$(echo "$s" | sed -n 's/.*"not_allowed":\([0-9]*\).*/\1/p')
    discards=$((discards + ${mal:-0} + ${na:-0}))
    p=$(echo "$s" | sed -n 's/.*"ingest_pauses":\([0-9]*\).*/\1/p')
    pauses=$((pauses + ${p:-0}))
    v2=$(echo "$s" | sed -n 's/.*"reports":{"v2":\([0-9]*\).*/\1/p')
    decoded=$((decoded + ${v2:-0}))
  done
  for p in "${cpids[@]}"; do kill -TERM "$p"; done
  for p in "${cpids[@]}"; do wait "$p" || true; done
  elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  "$bin" serve --store "clickhouse:$urls" --http 127.0.0.1:0 >"$work/serve.out" 2>/dev/null &
  spid=$!
  pids+=($spid)
  for _ in $(seq 1 100); do [ -s "$work/serve.out" ] && break; sleep 0.1; done
  shttp=$(sed -n 's/.*"http":"\([^"]*\)".*/\1/p' "$work/serve.out")
  stats=$(curl -s "http://$shttp/api/stats")
  kill "$spid"
  stored=$(echo "$stats" | sed -n 's/.*"reports_v2":\([0-9]*\).*/\1/p')
  flows_stored=$(echo "$stats" | sed -n 's/.*"flows":\([0-9]*\).*/\1/p')
  if [ "$nostore" = 1 ]; then stored=$decoded; flows_stored=0; fi
  # A kernel-dropped datagram held 8 reports (blast's batch).
  accounted=$((stored + 8 * kernel + discards))
  echo "{\"shards\":$shards,\"offered_per_collector\":$rate,\"offered_total\":$((2 * rate)),\"sent_reports\":$sent_reports,\"stored_reports\":$stored,\"kernel_dropped_datagrams\":$kernel,\"discarded\":$discards,\"ingest_pauses\":$pauses,\"flows_stored\":$flows_stored,\"lossless\":$([ "$stored" -eq "$sent_reports" ] && echo true || echo false),\"accounted\":$([ "$accounted" -eq "$sent_reports" ] && echo true || echo false),\"seconds\":$elapsed,\"load1\":$load}"
done
