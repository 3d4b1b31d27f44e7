#!/usr/bin/env bash
# History queries at scale: p50/p99 of every history route through `intscope serve`'s HTTP API.
#
#   scripts/history-bench.sh [--queries N] [--keep | --reuse DIR] [--routes REGEX]
#                            clickhouse|sqlite [ROWS]
#
# Fills a fresh store with ROWS rows spread over the last 3 days (default: 100 M for ClickHouse,
# 10 M for SQLite), quickly and without the collector: ClickHouse with `INSERT ... SELECT ...
# FROM system.numbers` into the schema's own tables (the per-minute rollups fill through their
# views), SQLite with `sqlite3` in one transaction per table. Shares: flow_stats 60 %, events
# 20 % (ClickHouse 10 %, flows 4 %: a flow version per write), queue_stats 15 %, port_stats 4 %
# (ClickHouse 5 %), incidents 1 %; 100 000 flows, 2 000 queues (200 nodes × 10 ports). Then
# starts release `intscope serve` on it and asks each route N times (default 100; curl's
# time_total), printing one JSON line per route with p50 and p99 in ms, the resolution the answer
# said, the rows the last answer held (the flow route: its intervals and the summary), and the
# load average. Long steps print progress on stderr.
# Needs `cargo build --release -p intscope`, curl, and clickhouse-server or sqlite3. --keep
# leaves the store (its folder's path on stderr; ClickHouse keeps running) for another run:
# --reuse DIR measures on it without filling (the same ROWS: the routes' times derive from it).
# --routes measures only the routes whose name matches.
set -euo pipefail
cd "$(dirname "$0")/.."

queries=100
keep=0
reuse=
only=.
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --queries) queries="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --routes) only="$2"; shift 2 ;;
    --reuse) reuse="$2"; keep=1; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
backend="${args[0]:-}"
case "$backend" in
  clickhouse) rows="${args[1]:-100000000}" ;;
  sqlite) rows="${args[1]:-10000000}" ;;
  *) sed -n '2,/^set -e/p' "$0" | grep '^#'; exit 2 ;;
esac
bin="${CARGO_TARGET_DIR:-target}/release/intscope"
[ -x "$bin" ] || { echo "build first: cargo build --release -p intscope" >&2; exit 1; }

work=${reuse:-$(mktemp -d)}
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ "$keep" = 0 ]; then
    scripts/clickhouse.sh stop "$work/ch" --now >/dev/null 2>&1 || true
    rm -rf "$work"
  else
    echo "kept: $work" >&2
  fi
}
trap cleanup EXIT
say() { echo "[$(date +%T)] $*" >&2; }

flows=100000
queues=2000
now=$(($(date +%s) * 1000000000))
# A store filled earlier is measured as of when it was filled.
[ -z "$reuse" ] || now=$(cat "$work/now")
echo "$now" >"$work/now"
span=$((3 * 86400 * 1000000000))
t0=$((now - span))
# A flow k: 10.0.0.1 → 10.1.0.1, UDP, source port 10000 + k % 50000, destination port
# 10000 + k / 50000 (the text the store hashes has a fixed length: see flow_hash_sql).
sp() { echo "(10000 + ($1) % 50000)"; }
dp() { echo "(10000 + intDiv($1, 50000))"; }

# The store's flow_hash (FNV-1a of "src dst proto src_port dst_port", shifted right by 1) of
# flow k in ClickHouse SQL, one byte at a time.
flow_hash_sql() {
  local k="$1" h="toUInt64('14695981039346656037')" text="10.0.0.1 10.1.0.1 17 " i b
  for ((i = 0; i < ${#text}; i++)); do
    b=$(printf '%d' "'${text:i:1}")
    h="multiply(bitXor($h, $b), toUInt64(1099511628211))"
  done
  for part in "$(sp "$k")" space "$(dp "$k")"; do
    if [ "$part" = space ]; then
      h="multiply(bitXor($h, 32), toUInt64(1099511628211))"
      continue
    fi
    for div in 10000 1000 100 10 1; do
      h="multiply(bitXor($h, 48 + intDiv($part, $div) % 10), toUInt64(1099511628211))"
    done
  done
  echo "bitShiftRight($h, 1)"
}

# Inserts `count` rows into a table, in ten steps (progress on stderr): $1 table, $2 count,
# $3 the SELECT's columns over `n` (the row number).
ch_fill() {
  local table="$1" count="$2" cols="$3" step off
  step=$(((count + 9) / 10))
  for ((off = 0; off < count; off += step)); do
    local n=$((count - off < step ? count - off : step))
    curl -sS --fail-with-body "$ch_url/?max_memory_usage=4000000000" --data-binary \
      "INSERT INTO intscope.$table SELECT $cols FROM (SELECT number AS n FROM system.numbers LIMIT $off, $n)" \
      || { say "insert into $table failed"; exit 1; }
    say "$table: $((off + n)) of $count rows"
  done
}

start_serve() {
  "$bin" serve --store "$1" --http 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.err" &
  pids+=($!)
  for _ in $(seq 1 600); do [ -s "$work/serve.out" ] && break; sleep 0.1; done
  [ -s "$work/serve.out" ] || { cat "$work/serve.err" >&2; exit 1; }
  api="http://$(sed -n 's/.*"http":"\([^"]*\)".*/\1/p' "$work/serve.out")"
}

fill_started=$(date +%s)
if [ -n "$reuse" ]; then
  store=$(cat "$work/store")
  stored=$(cat "$work/stored")
elif [ "$backend" = clickhouse ]; then
  port=$((23000 + RANDOM % 5000))
  scripts/clickhouse.sh start "$work/ch" --port "$port" >/dev/null
  ch_url="http://127.0.0.1:$port"
  # serve creates the schema (it opens the store as the collectors do).
  start_serve "clickhouse:$ch_url"
  kill "${pids[-1]}"
  n_fs=$((rows * 60 / 100)) n_ev=$((rows / 10)) n_fl=$((rows * 4 / 100))
  n_q=$((rows * 20 / 100)) n_p=$((rows * 5 / 100)) n_in=$((rows / 100))
  k="(n % $flows)"
  per_flow=$((n_fs / flows))
  ch_fill flow_stats "$n_fs" "$t0 + intDiv(n, $flows) * $((span / (per_flow > 0 ? per_flow : 1))) AS time_ns,
    $(flow_hash_sql "$k") AS flow_hash, '10.0.0.1', '10.1.0.1', 17, $(sp "$k"), $(dp "$k"),
    10 + n % 7, 20000 + n % 5000, 23000 + n % 5000, '[900,1200,800,950]', '[10,200,30,5]'"
  versions=$((n_fl / flows))
  ch_fill flows "$n_fl" "'bench', 1, $k, $(flow_hash_sql "$k") AS flow_hash, '10.0.0.1', '10.1.0.1', 17,
    $(sp "$k"), $(dp "$k"), $t0 + $k, $t0 + intDiv(n, $flows) * $((span / (versions > 0 ? versions : 1))) + $k,
    1 + intDiv(n, $flows) * 10, 0, NULL, '[]', 0, 25000, 40000"
  ch_fill queue_stats "$n_q" "$t0 + intDiv(n, $queues) * $((span / (n_q / queues))), 'bench',
    1 + intDiv(n % $queues, 10), n % 10, 0, 100, 50.5, 100 + n % 900"
  ch_fill port_stats "$n_p" "$t0 + intDiv(n, $queues) * $((span / (n_p / queues))), 'bench',
    1 + intDiv(n % $queues, 10), n % 10, 100, 900.5, 1000 + n % 900, n % 3"
  ch_fill events "$n_ev" "'bench', n + 1, $t0 + n * $((span / n_ev)) AS t,
    ['drop', 'congestion-start', 'path-change', 'latency-anomaly'][1 + n % 4], toUInt32(1 + n % 200),
    toUInt32(n % 10), NULL, NULL, NULL, NULL, NULL, NULL, NULL, '{}', t, NULL"
  ch_fill incidents "$n_in" "'bench', n + 1, 1, 'congestion', toUInt32(1 + n % 200),
    $t0 + n * $((span / n_in)) AS s, s + 5000000000, s + 9000000000,
    concat('{\"id\":', toString(n + 1), ',\"kind\":\"congestion\",\"place\":{\"node\":', toString(1 + n % 200),
      ',\"port\":3,\"queue\":null,\"peer_node\":null,\"peer_port\":null,\"hw_id\":null},\"cause\":null,',
      '\"state\":\"resolved\",\"severity\":\"warning\",\"start_ns\":', toString(s), ',\"start_uncertainty_ns\":0,',
      '\"last_update_ns\":', toString(s + 5000000000), ',\"end_ns\":', toString(s + 9000000000),
      ',\"end_uncertainty_ns\":0,\"end_reason\":\"normal\",\"received_ns\":null,\"updates\":1,',
      '\"counts\":{\"samples\":0,\"reports\":0,\"packets_dropped\":null,\"reports_lost\":0,\"flows\":0,\"episodes\":0},',
      '\"peak\":null,\"threshold\":1000,\"baseline\":null,\"flows\":[],\"symptoms\":[],\"evidence\":null}'), s"
  # The flows' newest versions as a collector's writes leave them: a part per flush, merged in
  # the background as they come (a minute of 100 000 versions a second left one part of
  # 100 000 rows); this fill's few large parts of many versions each would wait long for a merge.
  say "merging the flows' newest versions"
  curl -sS --fail-with-body "$ch_url/" --data-binary 'OPTIMIZE TABLE intscope.`.inner.flows_latest` FINAL'
  say "the other tables stay as filled (OPTIMIZE would take long: the reads run on those parts)"
  stored=$(curl -sS "$ch_url/" --data-binary \
    "SELECT sum(rows) FROM system.parts WHERE active AND database = 'intscope' AND table NOT LIKE '.inner%' AND table != 'schema_version'")
  store="clickhouse:$ch_url"
else
  command -v sqlite3 >/dev/null || { echo "sqlite3 is not installed" >&2; exit 1; }
  dir="$work/sqlite"
  # A collector creates the schema (its store file), then stops.
  "$bin" collect --data "$dir" --listen 127.0.0.1:0 --http 127.0.0.1:0 >"$work/c.out" 2>"$work/c.err" &
  cpid=$!
  for _ in $(seq 1 600); do [ -s "$work/c.out" ] && break; sleep 0.1; done
  kill -TERM "$cpid"
  wait "$cpid" || true
  db="$dir/intscope.db"
  n_fs=$((rows * 60 / 100)) n_ev=$((rows / 5)) n_q=$((rows * 15 / 100))
  n_p=$((rows * 4 / 100)) n_in=$((rows / 100))
  per_flow=$((n_fs / flows))
  gen() { echo "WITH RECURSIVE c(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM c WHERE n < $1 - 1)"; }
  sq() {
    sqlite3 "$db" "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; BEGIN; $2; COMMIT;" >/dev/null
    say "$1 done"
  }
  sq flows "$(gen $flows) INSERT INTO flows(rowid, src, dst, proto, src_port, dst_port, first_seen_ns,
    last_seen_ns, reports, drops, last_drop_reason, path, path_changes, e2e_p50, e2e_p99)
    SELECT n + 1, '10.0.0.1', '10.1.0.1', 17, 10000 + n % 50000, 10000 + n / 50000, $t0 + n,
      $now - $flows + n, 1000, 0, NULL, '[]', 0, 25000, 40000 FROM c"
  # A flow's rows together (its index is written in order).
  sq "flow_stats ($n_fs rows)" "$(gen "$n_fs") INSERT INTO flow_stats
    SELECT $t0 + (n % $per_flow) * $((span / per_flow)), 1 + n / $per_flow, 10 + n % 7,
      20000 + n % 5000, 23000 + n % 5000, '[900,1200,800,950]', '[10,200,30,5]' FROM c"
  sq "events ($n_ev rows)" "$(gen "$n_ev") INSERT INTO events(id, time_ns, kind, node_id, port, evidence, received_ns)
    SELECT n + 1, $t0 + n * $((span / n_ev)),
      CASE n % 4 WHEN 0 THEN 'drop' WHEN 1 THEN 'congestion-start' WHEN 2 THEN 'path-change' ELSE 'latency-anomaly' END,
      1 + n % 200, n % 10, '{}', $t0 + n * $((span / n_ev)) FROM c"
  sq "queue_stats ($n_q rows)" "$(gen "$n_q") INSERT INTO queue_stats
    SELECT $t0 + (n / $queues) * $((span / (n_q / queues))), 1 + (n % $queues) / 10, n % 10, 0, 100, 50.5,
      100 + n % 900 FROM c;
    INSERT INTO queue_stats_1m(minute_ns, node_id, port, queue_id, samples, occupancy_sum, max_occupancy)
      SELECT time_ns - time_ns % 60000000000, node_id, port, queue_id, sum(samples),
        sum(avg_occupancy * samples), max(max_occupancy)
      FROM queue_stats GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
  sq "port_stats ($n_p rows)" "$(gen "$n_p") INSERT INTO port_stats
    SELECT $t0 + (n / $queues) * $((span / (n_p / queues))), 1 + (n % $queues) / 10, n % 10, 100, 900.5,
      1000 + n % 900, n % 3 FROM c"
  sq "incidents ($n_in rows)" "$(gen "$n_in") INSERT INTO incidents(id, version, kind, node_id, start_ns,
    last_update_ns, end_ns, body, received_ns)
    SELECT n + 1, 2, 'congestion', 1 + n % 200, s, s + 5000000000, s + 9000000000,
      '{\"id\":' || (n + 1) || ',\"kind\":\"congestion\",\"place\":{\"node\":' || (1 + n % 200) ||
      ',\"port\":3,\"queue\":null,\"peer_node\":null,\"peer_port\":null,\"hw_id\":null},\"cause\":null,' ||
      '\"state\":\"resolved\",\"severity\":\"warning\",\"start_ns\":' || s || ',\"start_uncertainty_ns\":0,' ||
      '\"last_update_ns\":' || (s + 5000000000) || ',\"end_ns\":' || (s + 9000000000) ||
      ',\"end_uncertainty_ns\":0,\"end_reason\":\"normal\",\"received_ns\":null,\"updates\":1,' ||
      '\"counts\":{\"samples\":0,\"reports\":0,\"packets_dropped\":null,\"reports_lost\":0,\"flows\":0,\"episodes\":0},' ||
      '\"peak\":null,\"threshold\":1000,\"baseline\":null,\"flows\":[],\"symptoms\":[],\"evidence\":null}', s
    FROM (SELECT n, $t0 + n * $((span / n_in)) AS s FROM c)"
  sqlite3 "$db" "PRAGMA wal_checkpoint(TRUNCATE); ANALYZE;" >/dev/null
  stored=$(sqlite3 "$db" "SELECT (SELECT count(*) FROM flows) + (SELECT count(*) FROM flow_stats)
    + (SELECT count(*) FROM events) + (SELECT count(*) FROM queue_stats) + (SELECT count(*) FROM port_stats)
    + (SELECT count(*) FROM incidents)")
  store="sqlite:$dir"
fi
echo "$store" >"$work/store"
echo "$stored" >"$work/stored"
fill_s=$(($(date +%s) - fill_started))
say "filled: $stored rows in $fill_s s"

start_serve "$store"
hour=3600000000000
# The routes: each path with its query; FLOW is replaced by a random stored flow's key.
routes=(
  "events /api/history/events"
  "events_kind /api/history/events?kind=drop&limit=100"
  "events_hour /api/history/events?since=$((now - hour))&limit=100"
  "events_node /api/history/events?node=7&limit=100"
  "events_node_quiet /api/history/events?node=999&limit=100"
  "flows /api/history/flows"
  "flows_day /api/history/flows?since=$((now - 24 * hour))&until=$((now - 23 * hour))&limit=100"
  "incidents /api/history/incidents"
  "incidents_node /api/history/incidents?node=7&limit=100"
  "queues /api/history/queues?limit=1000"
  "queues_hour /api/history/queues?since=$((now - hour))&until=$now&limit=1000"
  "queues_hour_node /api/history/queues?since=$((now - hour))&until=$now&node=7"
  "queues_3d /api/history/queues?since=$t0&until=$now&limit=1000"
  "queues_3d_node /api/history/queues?since=$t0&until=$now&node=7"
  "flow /api/flow?FLOW"
  "flow_3d /api/flow?FLOW&since=$t0&until=$now"
)
for r in "${routes[@]}"; do
  name=${r%% *}
  path=${r#* }
  [[ $name =~ $only ]] || continue
  times=()
  ok=0
  for ((i = 0; i < queries; i++)); do
    k=$((RANDOM * 32768 + RANDOM))
    k=$((k % flows))
    flow="src=10.0.0.1&dst=10.1.0.1&proto=17&src_port=$((10000 + k % 50000))&dst_port=$((10000 + k / 50000))"
    url="$api${path/FLOW/"$flow"}"
    out=$(curl -sS -o "$work/answer" -w '%{http_code} %{time_total}' "$url")
    if [ "${out%% *}" = 200 ]; then
      ok=$((ok + 1))
    elif [ "$ok" = 0 ] && [ "$i" = 0 ]; then
      say "$name: HTTP ${out%% *}: $(head -c 300 "$work/answer")"
    fi
    times+=("${out#* }")
  done
  read -r p50 p99 < <(printf '%s\n' "${times[@]}" | sort -g | awk '{ t[NR] = $1 * 1000 }
    END { i50 = int(NR * 0.5 + 0.5); i99 = int(NR * 0.99 + 0.5); if (i50 < 1) i50 = 1; if (i99 < 1) i99 = 1;
          printf "%.1f %.1f\n", t[i50], t[i99] }')
  resolution=$(sed -n 's/.*"resolution":"\([^"]*\)".*/\1/p' "$work/answer")
  listed=$({ grep -o '"\(time_ns\|last_seen_ns\|start_ns\)"' "$work/answer" || true; } | wc -l)
  echo "{\"backend\":\"$backend\",\"rows\":$stored,\"route\":\"$name\",\"path\":\"${path%%\?*}\",\"queries\":$queries,\"ok\":$ok,\"p50_ms\":$p50,\"p99_ms\":$p99,\"resolution\":\"${resolution:-}\",\"rows_answered\":$listed,\"load\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
done
