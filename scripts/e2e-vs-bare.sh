#!/bin/bash
# Each end-to-end ingest figure beside the bare receive loop, in the same run (issue 19):
# alternately `recvloop` (blocking recvmmsg, count and discard, the same socket and buffer as
# `intscope collect`) and `intscope collect --no-store`, each fed by the same `intscope blast`
# for DURATION s at RATE. Prints one JSON line per pair: both sides' received datagrams and
# reports per second, the ratio (end to end / bare), kernel drops and /proc/loadavg before each.
# Usage: scripts/e2e-vs-bare.sh [VERSION...]   (default: 2 0.5)
# Env: RUNS=pairs per version (3), DURATION=s (5), RATE=reports/s (0: full), FLOWS (10000),
#      HOPS (4), BATCH=v2.0 reports per datagram (8), BIN_DIR (target/release; needs
#      `cargo build --release -p intscope -p intscope-collector --bin intscope --bin recvloop`).
set -euo pipefail
D=${BIN_DIR:-target/release}
RUNS=${RUNS:-3}
DURATION=${DURATION:-5}
VERSIONS=${*:-2 0.5}
TMP=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done; rm -rf "$TMP"' EXIT

field() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])" "$1" "$2"; }
wait_line() { for _ in $(seq 100); do [ -s "$1" ] && return; sleep 0.1; done; echo "no output in $1" >&2; exit 1; }

blast() { # $1 target, $2 version
    "$D/intscope" blast --to "$1" --rate "${RATE:-0}" --duration "$DURATION" --flows "${FLOWS:-10000}" \
        --hops "${HOPS:-4}" --version "$2" --batch "${BATCH:-8}" 2>/dev/null
}

bare() { # $1 version -> JSON {load, blast, loop}
    local load out
    load=$(cat /proc/loadavg)
    out=$TMP/bare
    "$D/recvloop" --idle-ms 1000 --duration-s $((DURATION + 30)) >"$out" &
    local p=$!
    PIDS+=("$p")
    wait_line "$out"
    local b
    b=$(blast "$(field "$out" listen)" "$1")
    wait "$p"
    python3 -c "import json,sys; l=open(sys.argv[1]).read().splitlines(); print(json.dumps({'load': sys.argv[2], 'blast': json.loads(sys.argv[3]), 'loop': json.loads(l[1])}))" "$out" "$load" "$b"
}

e2e() { # $1 version -> JSON {load, blast, ingest}
    local load out
    load=$(cat /proc/loadavg)
    out=$TMP/e2e
    "$D/intscope" collect --listen 127.0.0.1:0 --http 127.0.0.1:0 --int-udp-port 17768 --no-store >"$out" 2>/dev/null &
    local p=$!
    PIDS+=("$p")
    wait_line "$out"
    local udp http b s
    udp=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['listen'][0])" "$out")
    http=$(field "$out" http)
    b=$(blast "$udp" "$1")
    sleep 1
    s=$(curl -s "http://$http/api/stats")
    kill -INT "$p"
    wait "$p" 2>/dev/null || true
    python3 -c "import json,sys; s=json.loads(sys.argv[3]); print(json.dumps({'load': sys.argv[1], 'blast': json.loads(sys.argv[2]), 'ingest': s['ingest'], 'report_groups_lost': s.get('report_groups_lost'), 'reports_lost': s.get('reports_lost')}))" "$load" "$b" "$s"
}

for v in $VERSIONS; do
    for r in $(seq "$RUNS"); do
        # Alternate which side goes first, so a drift in load does not favour one.
        if [ $((r % 2)) -eq 1 ]; then B=$(bare "$v"); E=$(e2e "$v"); else E=$(e2e "$v"); B=$(bare "$v"); fi
        python3 - "$v" "$r" "$B" "$E" <<'PY'
import json, sys
v, r, b, e = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
def rates(blast, datagrams):
    per = blast["reports"] / max(blast["datagrams"], 1)
    secs = blast["seconds"]
    return datagrams / secs, datagrams * per / secs
i = e["ingest"]
bd, br = rates(b["blast"], b["loop"]["datagrams"])
ed, er = rates(e["blast"], i["datagrams_received"])
print(json.dumps({
    "version": v, "run": r,
    "bare": {"loadavg": b["load"], "sent_datagrams": b["blast"]["datagrams"],
             "received_datagrams": b["loop"]["datagrams"], "datagrams_per_s": round(bd),
             "reports_per_s": round(br), "kernel_dropped": b["loop"]["kernel_dropped"],
             "cpu_us_per_datagram": b["loop"]["cpu_us_per_datagram"]},
    "e2e": {"loadavg": e["load"], "sent_datagrams": e["blast"]["datagrams"],
            "received_datagrams": i["datagrams_received"], "datagrams_per_s": round(ed),
            "reports_per_s": round(er), "reports_decoded": i.get("reports_decoded"),
            "kernel_dropped": i.get("kernel_dropped")},
    "ratio": round(ed / bd, 3) if bd else None,
}))
PY
    done
done
