#!/usr/bin/env bash
# Reports/s into a ClickHouse cluster through two collectors, and whether anything was lost.
#
#   scripts/cluster-bench.sh [--shards N] [--replicas R] [--outage S] [--flows F] [--duration S]
#                            [--no-store | --compare] RATE...
#
# For each RATE (reports/s offered to EACH collector): starts N ClickHouse shards (default 2) and
# two release `intscope collect --store clickhouse:...` processes on loopback, blasts RATE
# reports/s of Report v2.0 (8 per datagram, F flows, default 10 000) at each for S seconds
# (default 5), waits until every datagram is accounted for, stops the collectors (SIGTERM: their
# final flush) and reads the fabric's stored counters through `intscope serve`. One JSON line per
# rate: sent, stored (reports_v2 in the store), kernel drops, discards, ingest pauses, and
# whether sent = stored + counted losses. Needs `cargo build --release -p intscope`, curl and
# clickhouse-server. With --no-store the collectors keep no history (the same run without the
# store, to compare): "stored" is then what the collectors decoded. With --replicas R each shard
# has R replicas (ZooKeeper; Debian's zookeeper package); with --outage S every replica of the
# last shard is killed 2 s into the blast and started again S s later (the blast must last
# longer: --duration), and the collectors are stopped only once their spools are empty.
# `stored_over_decoded` is the fabric's stored reports over the reports the collectors decoded,
# in the same run. With --compare each rate runs twice, with the store and then with
# --no-store, and a third line compares their kernel drops (the store must cost ingest nothing:
# `kernel_drop_share` of the datagrams sent, with and without the store).
set -euo pipefail
cd "$(dirname "$0")/.."

shards=2
replicas=1
outage=0
flows=10000
duration=5
nostore=0
compare=0
rates=()
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) shards="$2"; shift 2 ;;
    --replicas) replicas="$2"; shift 2 ;;
    --outage) outage="$2"; shift 2 ;;
    --flows) flows="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --no-store) nostore=1; shift ;;
    --compare) compare=1; shift ;;
    *) rates+=("$1"); shift ;;
  esac
done
[ ${#rates[@]} -gt 0 ] || { sed -n '2,21p' "$0"; exit 2; }
[ "$outage" = 0 ] || [ "$((outage + 2))" -lt "$duration" ] || {
  echo "--outage $outage needs --duration above $((outage + 2))" >&2
  exit 2
}
bin="${CARGO_TARGET_DIR:-target}/release/intscope"
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
# One run at $rate per collector, with the store unless $nostore: prints its JSON line.
run_one() {
  scripts/clickhouse.sh stop "$work/ch" >/dev/null 2>&1 || true
  rm -rf "$work/ch"
  scripts/clickhouse.sh start "$work/ch" --shards "$shards" --replicas "$replicas" --port "$port" >/dev/null
  urls=$(scripts/clickhouse.sh url "$work/ch")
  https=() udps=() cpids=()
  for c in 1 2; do
    if [ "$nostore" = 1 ]; then store=(--no-store); else store=(--store "clickhouse:$urls"); fi
    "$bin" collect --listen 127.0.0.1:0 --http 127.0.0.1:0 "${store[@]}" \
      --collector-name "c$c" --spool "$work/spool" >"$work/c$c.out" 2>"$work/c$c.err" &
    cpids+=($!)
    pids+=($!)
  done
  for c in 1 2; do
    # Creating replicated tables (ZooKeeper) on every server takes a while on a loaded host.
    for _ in $(seq 1 600); do [ -s "$work/c$c.out" ] && break; sleep 0.1; done
    [ -s "$work/c$c.out" ] || { echo "collector c$c did not start:" >&2; cat "$work/c$c.err" >&2; exit 1; }
    https+=("$(sed -n 's/.*"http":"\([^"]*\)".*/\1/p' "$work/c$c.out")")
    udps+=("$(sed -n 's/.*"listen":\["\([^"]*\)".*/\1/p' "$work/c$c.out")")
  done
  start=$(date +%s.%N)
  "$bin" blast --to "${udps[0]}" --rate "$rate" --duration "$duration" --flows "$flows" >"$work/b1" &
  b1=$!
  "$bin" blast --to "${udps[1]}" --rate "$rate" --duration "$duration" --flows "$flows" >"$work/b2" &
  b2=$!
  if [ "$outage" != 0 ]; then
    # Every replica of the last shard down for the outage, during the blast.
    sleep 2
    last=$(((shards - 1) * replicas))
    for ((k = last; k < last + replicas; k++)); do scripts/clickhouse.sh kill "$work/ch" "$k"; done
    sleep "$outage"
    for ((k = last; k < last + replicas; k++)); do scripts/clickhouse.sh revive "$work/ch" "$k"; done
  fi
  wait "$b1"
  wait "$b2"
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
  # Spooled writes replayed before the collectors stop (they would be replayed at their next
  # start otherwise).
  spooled=0 spool_dropped=0
  for c in 0 1; do
    for _ in $(seq 1 600); do
      s=$(curl -s "http://${https[$c]}/api/stats")
      left=$(echo "$s" | sed -n 's/.*"spool":{[^}]*"rows":\([0-9]*\).*/\1/p')
      [ "${left:-0}" = 0 ] && break
      sleep 0.1
    done
    sp=$(echo "$s" | sed -n 's/.*"spool":{[^}]*"spooled_rows":\([0-9]*\).*/\1/p')
    df=$(echo "$s" | sed -n 's/.*"spool":{[^}]*"dropped_full_rows":\([0-9]*\).*/\1/p')
    di=$(echo "$s" | sed -n 's/.*"spool":{[^}]*"dropped_io_rows":\([0-9]*\).*/\1/p')
    spooled=$((spooled + ${sp:-0}))
    spool_dropped=$((spool_dropped + ${df:-0} + ${di:-0}))
  done
  for p in "${cpids[@]}"; do kill -TERM "$p"; done
  for p in "${cpids[@]}"; do wait "$p" || true; done
  elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$replicas" -gt 1 ]; then
    # A replica back from an outage may still be fetching parts: wait until each has them.
    for ((k = 0; k < shards * replicas; k++)); do
      for t in $(curl -s "http://127.0.0.1:$((port + k))/" --data-binary \
        "SELECT name FROM system.tables WHERE database = 'intscope' AND engine LIKE 'Replicated%'"); do
        curl -s "http://127.0.0.1:$((port + k))/" --data-binary "SYSTEM SYNC REPLICA intscope.\`$t\`" >/dev/null
      done
    done
  fi
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
  ratio=$(awk -v s="$stored" -v d="$decoded" 'BEGIN { if (d > 0) printf "%.4f", s / d; else print "null" }')
  echo "{\"shards\":$shards,\"replicas\":$replicas,\"outage_s\":$outage,\"decoded_reports\":$decoded,\"stored_over_decoded\":$ratio,\"spooled_rows\":$spooled,\"spool_dropped_rows\":$spool_dropped,\"offered_per_collector\":$rate,\"offered_total\":$((2 * rate)),\"sent_reports\":$sent_reports,\"stored_reports\":$stored,\"kernel_dropped_datagrams\":$kernel,\"discarded\":$discards,\"ingest_pauses\":$pauses,\"flows_stored\":$flows_stored,\"lossless\":$([ "$stored" -eq "$sent_reports" ] && echo true || echo false),\"accounted\":$([ "$accounted" -eq "$sent_reports" ] && echo true || echo false),\"seconds\":$elapsed,\"load1\":$load}"
}

for rate in "${rates[@]}"; do
  if [ "$compare" = 1 ]; then
    # Not in a $(...) subshell: the collectors' pids must reach the exit trap.
    nostore=0
    run_one >"$work/with"
    with=$(cat "$work/with")
    echo "$with"
    nostore=1
    run_one >"$work/without"
    without=$(cat "$work/without")
    echo "$without"
    share() {
      echo "$1" | sed -n 's/.*"sent_reports":\([0-9]*\).*"kernel_dropped_datagrams":\([0-9]*\).*/\2 \1/p' |
        awk '{ if ($2 > 0) printf "%.4f", 8 * $1 / $2; else print "null" }'
    }
    echo "{\"compare\":true,\"offered_per_collector\":$rate,\"kernel_drop_share_store\":$(share "$with"),\"kernel_drop_share_no_store\":$(share "$without"),\"load1\":$(cut -d' ' -f1 /proc/loadavg)}"
  else
    run_one
  fi
done
