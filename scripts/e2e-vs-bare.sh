#!/bin/bash
# Each end-to-end ingest figure beside the bare receive loop, in the same run (issue 19):
# alternately `recvloop` (blocking recvmmsg, count and discard, the same socket and buffer as
# `intscope collect`) and `intscope collect --no-store`, each fed by the same `intscope blast`
# for DURATION s at RATE. Prints one JSON line per pair: both sides' received datagrams and
# reports per second, the ratio (collect / bare), CPU per received datagram of each receiver
# (collect: its receive threads, and the whole process with the API),
# kernel drops and /proc/loadavg before each.
# Usage: scripts/e2e-vs-bare.sh [VERSION...]   (default: 2 0.5)
# Env: RUNS=pairs per version (3), DURATION=s (5), RATE=reports/s (0: full), FLOWS (10000),
#      HOPS (4), BATCH=v2.0 reports per datagram (8),
#      MODE=e2e (decode and correlate) or discard (`collect --discard`: the same receive loop
#      without decoding), THREADS=collect's receive threads (1),
#      READS=1: during the collect side, read the flow list back to back
#      (`/api/flows?limit=100&sort=reports`) and report the p50/p99 latency of the reads that
#      began while blast was sending,
#      TASKSET=CPU list to pin both receivers to (e.g. 1; blast then gets the others),
#      NETNS=1: blast sends from a network namespace of its own over a veth pair (another
#      machine's stand-in: its packets cross a link, not loopback; needs root; addresses from
#      the benchmarking range 198.18.0.0/30, inside this run's own namespace; with TASKSET the
#      sender keeps its own cores),
#      COLLECT_ARGS=more `intscope collect` flags (e.g. "--recv-batch 16"),
#      BIN_DIR (target/release; needs
#      `cargo build --release -p intscope -p intscope-collector --bin intscope --bin recvloop`).
set -euo pipefail
D=${BIN_DIR:-target/release}
RUNS=${RUNS:-3}
DURATION=${DURATION:-5}
MODE=${MODE:-e2e}
THREADS=${THREADS:-1}
VERSIONS=${*:-2 0.5}
TMP=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done; rm -rf "$TMP"' EXIT

PIN=()
BLAST_PIN=()
if [ -n "${TASKSET:-}" ]; then
    PIN=(taskset -c "$TASKSET")
    OTHERS=$(python3 -c "import os,sys; mine={int(c) for c in sys.argv[1].split(',')}; print(','.join(str(c) for c in sorted(os.sched_getaffinity(0)) if c not in mine) or sys.argv[1])" "$TASKSET")
    BLAST_PIN=(taskset -c "$OTHERS")
fi

LISTEN=127.0.0.1
BLAST_NS=()
if [ -n "${NETNS:-}" ]; then
    NS=intscope-blast-$$
    VETH=isb$$
    ip netns add "$NS"
    ip link add "${VETH}a" type veth peer name "${VETH}b"
    ip link set "${VETH}b" netns "$NS"
    ip addr add 198.18.0.1/30 dev "${VETH}a"
    ip link set "${VETH}a" up
    ip -n "$NS" addr add 198.18.0.2/30 dev "${VETH}b"
    ip -n "$NS" link set "${VETH}b" up
    ip -n "$NS" link set lo up
    trap 'for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done; ip link del "${VETH}a" 2>/dev/null; ip netns del "$NS" 2>/dev/null; rm -rf "$TMP"' EXIT
    LISTEN=198.18.0.1
    BLAST_NS=(ip netns exec "$NS")
fi

field() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])" "$1" "$2"; }
wait_line() { for _ in $(seq 100); do [ -s "$1" ] && return; sleep 0.1; done; echo "no output in $1" >&2; exit 1; }
# CPU seconds (user + system) of process $1's receive threads (named ingest-*), and of the whole
# process (the API's threads included).
cpu_of() { python3 - "$1" <<'PY'
import os, sys
def cpu(path):
    f = open(path).read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / 100
d = "/proc/%s/task" % sys.argv[1]
ingest = sum(cpu("%s/%s/stat" % (d, t)) for t in os.listdir(d)
             if open("%s/%s/comm" % (d, t)).read().startswith("ingest"))
print(ingest, cpu("/proc/%s/stat" % sys.argv[1]))
PY
}

blast() { # $1 target, $2 version
    "${BLAST_NS[@]}" "${BLAST_PIN[@]}" "$D/intscope" blast --to "$1" --rate "${RATE:-0}" --duration "$DURATION" --flows "${FLOWS:-10000}" \
        --hops "${HOPS:-4}" --version "$2" --batch "${BATCH:-8}" 2>/dev/null
}

bare() { # $1 version -> JSON {load, blast, loop}
    local load out
    load=$(cat /proc/loadavg)
    out=$TMP/bare
    "${PIN[@]}" "$D/recvloop" --listen "$LISTEN:0" --idle-ms 1000 --duration-s $((DURATION + 30)) >"$out" &
    local p=$!
    PIDS+=("$p")
    wait_line "$out"
    local b
    b=$(blast "$(field "$out" listen)" "$1")
    wait "$p"
    python3 -c "import json,sys; l=open(sys.argv[1]).read().splitlines(); print(json.dumps({'load': sys.argv[2], 'blast': json.loads(sys.argv[3]), 'loop': json.loads(l[1])}))" "$out" "$load" "$b"
}

# Reads the flow list back to back until $2 exists; writes each read's seconds to $3.
reader() { # $1 http addr, $2 stop file, $3 output
    python3 - "$1" "$2" "$3" <<'PY'
import os, sys, time, urllib.request
url = "http://%s/api/flows?limit=100&sort=reports" % sys.argv[1]
took = []
while not os.path.exists(sys.argv[2]):
    t = time.time()
    urllib.request.urlopen(url, timeout=30).read()
    took.append((t, time.time() - t))
open(sys.argv[3], "w").write("\n".join("%.6f %.6f" % x for x in took))
PY
}

e2e() { # $1 version -> JSON {load, blast, ingest, cpu_seconds, reads}
    local load out extra=()
    load=$(cat /proc/loadavg)
    out=$TMP/e2e
    [ "$MODE" = discard ] && extra=(--discard)
    "${PIN[@]}" "$D/intscope" collect --listen "$LISTEN:0" --http 127.0.0.1:0 --int-udp-port 17768 --no-store \
        --threads "$THREADS" "${extra[@]}" ${COLLECT_ARGS:-} >"$out" 2>/dev/null &
    local p=$!
    PIDS+=("$p")
    wait_line "$out"
    local udp http b s cpu0 cpu1 rp=""
    udp=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['listen'][0])" "$out")
    http=$(field "$out" http)
    rm -f "$TMP/stop" "$TMP/reads"
    if [ -n "${READS:-}" ]; then
        reader "$http" "$TMP/stop" "$TMP/reads" &
        rp=$!
    fi
    cpu0=$(cpu_of "$p")
    b=$(blast "$udp" "$1")
    date +%s.%N >"$TMP/blast_end"
    # The backlog drains, and the snapshot catches up (within its interval).
    sleep 1.5
    cpu1=$(cpu_of "$p")
    if [ -n "$rp" ]; then touch "$TMP/stop"; wait "$rp"; fi
    s=$(curl -s "http://$http/api/stats")
    kill -INT "$p"
    wait "$p" 2>/dev/null || true
    python3 - "$load" "$b" "$s" "$cpu0" "$cpu1" "$TMP/reads" "$(cat "$TMP/blast_end")" <<'PY'
import json, os, sys
load, b, s, c0, c1, rf, end = sys.argv[1:]
s = json.loads(s)
reads = None
if os.path.exists(rf):
    # Only the reads that began while blast was sending.
    start = float(end) - json.loads(b)["seconds"]
    rows = [l.split() for l in open(rf).read().splitlines() if l]
    t = sorted(float(d) for (at, d) in rows if start <= float(at) <= float(end))
    if t:
        q = lambda p: round(t[min(len(t) - 1, int(len(t) * p))] * 1000, 1)
        reads = {"n": len(t), "p50_ms": q(0.5), "p99_ms": q(0.99)}
(i0, p0), (i1, p1) = (map(float, c0.split()), map(float, c1.split()))
print(json.dumps({"load": load, "blast": json.loads(b), "ingest": s["ingest"], "flows": s.get("flows"),
                  "cpu_seconds": round(i1 - i0, 2), "process_cpu_seconds": round(p1 - p0, 2), "reads": reads,
                  "snapshot_cost_ms": s.get("snapshot_cost_ms"),
                  "report_groups_lost": s.get("report_groups_lost"), "reports_lost": s.get("reports_lost")}))
PY
}

for v in $VERSIONS; do
    for r in $(seq "$RUNS"); do
        # Alternate which side goes first, so a drift in load does not favour one.
        if [ $((r % 2)) -eq 1 ]; then B=$(bare "$v"); E=$(e2e "$v"); else E=$(e2e "$v"); B=$(bare "$v"); fi
        python3 - "$v" "$r" "$B" "$E" "$MODE" "$THREADS" <<'PY'
import json, sys
v, r, b, e, mode, threads = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5], sys.argv[6]
def rates(blast, datagrams):
    per = blast["reports"] / max(blast["datagrams"], 1)
    secs = blast["seconds"]
    return datagrams / secs, datagrams * per / secs
i = e["ingest"]
bd, br = rates(b["blast"], b["loop"]["datagrams"])
ed, er = rates(e["blast"], i["datagrams_received"])
sent = e["blast"]["datagrams"]
print(json.dumps({
    "version": v, "run": r, "mode": mode, "threads": int(threads),
    "bare": {"loadavg": b["load"], "sent_datagrams": b["blast"]["datagrams"],
             "received_datagrams": b["loop"]["datagrams"], "datagrams_per_s": round(bd),
             "reports_per_s": round(br), "kernel_dropped": b["loop"]["kernel_dropped"],
             "cpu_us_per_datagram": b["loop"]["cpu_us_per_datagram"]},
    "collect": {"loadavg": e["load"], "sent_datagrams": sent,
                "received_datagrams": i["datagrams_received"], "datagrams_per_s": round(ed),
                "reports_per_s": round(er), "reports_decoded": i.get("reports_decoded"),
                "kernel_dropped": i.get("kernel_dropped"),
                "dropped_pct": round(100 * (i.get("kernel_dropped") or 0) / max(sent, 1), 2),
                "cpu_us_per_datagram": round(e["cpu_seconds"] * 1e6 / max(i["datagrams_received"], 1), 3),
                "process_cpu_us_per_datagram": round(e["process_cpu_seconds"] * 1e6 / max(i["datagrams_received"], 1), 3),
                "snapshot_cost_ms": e["snapshot_cost_ms"],
                "flows": e["flows"], "reads": e["reads"]},
    "ratio": round(ed / bd, 3) if bd else None,
}))
PY
    done
done
