#!/bin/bash
# End-to-end on loopback: `intscope collect` (no store) and `intscope blast` for 5 s at full rate;
# prints blast's summary and the collector's ingest accounting.
# Usage: scripts/e2e-loopback.sh VERSION [COLLECT-FLAGS...]   (2 or 0.5; e.g. --discard for the
# collector without decoding); BIN=path/to/intscope to compare builds; RATE=reports/s (default 0: full).
# For figures beside the bare recvmmsg loop in the same run: scripts/e2e-vs-bare.sh.
set -euo pipefail
V=${1:-2}
shift || true
B=${BIN:-target/release/intscope}
OUT=$(mktemp)
"$B" collect --listen 127.0.0.1:0 --http 127.0.0.1:0 --int-udp-port 17768 --no-store "$@" >"$OUT" 2>/dev/null &
CP=$!
trap 'kill -INT $CP 2>/dev/null; wait $CP 2>/dev/null; rm -f "$OUT"' EXIT
for _ in $(seq 50); do [ -s "$OUT" ] && break; sleep 0.1; done
UDP=$(python3 -c "import json,sys; print(json.load(open('$OUT'))['listen'][0])")
HTTP=$(python3 -c "import json,sys; print(json.load(open('$OUT'))['http'])")
"$B" blast --to "$UDP" --rate "${RATE:-0}" --duration 5 --flows 10000 --hops 4 --version "$V" 2>/dev/null
sleep 2
curl -s "http://$HTTP/api/stats" | python3 -c "import json,sys; i=json.load(sys.stdin)['ingest']; print(json.dumps({k: i[k] for k in ('datagrams_received', 'reports_decoded', 'kernel_dropped', 'discarded') if k in i}))"
