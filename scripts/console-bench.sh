#!/usr/bin/env bash
# How long the console's pages take to draw against a collector holding many flows, beside the
# same pages at 1 000 flows in the same run (the baseline).
#
#   scripts/console-bench.sh [--runs R] [--pages "fabric overview flows incidents"] [FLOWS]
#
# For 1 000 flows and then FLOWS (default 100 000): starts a release `intscope collect
# --no-store` on loopback, fills it with `intscope blast` (Report v2.0, 3-hop paths) until it
# holds that many flows, and opens each page R times (default 10) in a fresh headless Chromium
# tab (scripts/console-time.mjs): the time from the navigation's start to the page's first
# complete draw. One JSON line per page and size (median and p90 in ms, the load average),
# then one per page with the ratio of FLOWS to the baseline; exits 1 when a page never drew.
# Needs `cargo build --release -p intscope`, curl, python3, chromium and Node 20.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=10
pages="fabric overview flows incidents"
flows=100000
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --pages) pages="$2"; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) flows="$1"; shift ;;
  esac
done
bin=target/release/intscope
[ -x "$bin" ] || { echo "build it first: cargo build --release -p intscope" >&2; exit 1; }

pid=
log=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; fi
  [ -n "$log" ] && rm -f "$log"
  pid=
  log=
}
trap cleanup EXIT
failed=0

declare -A median
for size in 1000 "$flows"; do
  log=$(mktemp)
  "$bin" collect --listen 127.0.0.1:0 --http 127.0.0.1:0 --no-store > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    grep -q '"http"' "$log" && break
    kill -0 "$pid" 2>/dev/null || { echo "the collector stopped: $(cat "$log")" >&2; exit 1; }
    sleep 0.1
  done
  grep -q '"http"' "$log" || { echo "the collector did not start in 10 s" >&2; exit 1; }
  http=$(grep -o '"http":"[^"]*"' "$log" | head -1 | cut -d'"' -f4)
  listen=$(grep -o '"listen":\["[^"]*"' "$log" | head -1 | cut -d'"' -f4)
  # The generator picks flows in the same order each run: six reports a flow reach them all.
  secs=$(( (size * 6 + 199999) / 200000 ))
  held=0
  for _ in 1 2 3 4 5; do
    "$bin" blast --to "$listen" --rate 200000 --duration "$secs" --flows "$size" > /dev/null
    sleep 1
    held=$(curl -sf "http://$http/api/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["flows"])')
    [ "$held" -ge "$size" ] && break
  done
  for page in $pages; do
    out=$(node --experimental-websocket --no-warnings scripts/console-time.mjs "http://$http/#/$page" "$runs")
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "$out" | PAGE="$page" HELD="$held" LOAD="$load" python3 -c '
import json, os, sys
d = json.load(sys.stdin)
print(json.dumps({"page": os.environ["PAGE"], "flows": int(os.environ["HELD"]), "runs": d["runs"],
                  "median_ms": d["median_ms"], "p90_ms": d["p90_ms"], "failed": d["failed"],
                  "load": os.environ["LOAD"]}))'
    median[$page.$size]=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_ms"] or "")')
    [ -n "${median[$page.$size]}" ] || failed=1
  done
  cleanup
done
for page in $pages; do
  a=${median[$page.$flows]}
  b=${median[$page.1000]}
  [ -n "$a" ] && [ -n "$b" ] || continue
  PAGE="$page" A="$a" B="$b" FLOWS="$flows" python3 -c '
import json, os
print(json.dumps({"page": os.environ["PAGE"],
                  "median_ratio_%s_over_1000" % os.environ["FLOWS"]: round(int(os.environ["A"]) / max(1, int(os.environ["B"])), 2)}))'
done
exit "$failed"
