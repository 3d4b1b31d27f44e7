#!/usr/bin/env bash
# The eBPF INT data path's cost (issue 31): h1 — r1 — r2 — r3 — h2 in network namespaces, kernel
# routing, default veth offloads, the INT domain's links (r1 — r2 — r3) at MTU 1600 in every run.
# Per round, interleaved so all see the same machine: iperf3 TCP h1 → h2 for SECONDS, the median
# of 500 ICMP pings (2 ms apart; ICMP passes the programs without INT) and of 500 UDP echoes
# (INT-marked h1 → h2), first with kernel forwarding alone, then with INT-MD, then INT-MX
# (`intscope agent --int-port`: source at r1, transit at r2, sink at r3; a collector decodes the
# reports). Then one INT-MD run with kernel.bpf_stats_enabled=1: each role's programs' run time
# per call (bpftool's run_time_ns / run_cnt; the statistics add their own clock reads), and the
# source's counters (how many TCP packets carried INT, how many were GSO and passed without).
#
#   sudo BIN=target/release/intscope scripts/int-bench.sh [ROUNDS] [SECONDS]   # default 5 × 5 s
#
# MODES (default "md mx"): the data path's runs per round; a mode with "-every" (md-every,
# mx-every) runs with --every-packet, a report for every INT packet (the kernel's flow report
# filter off), for a same-run comparison with the filter.
#
# ENCAP (default udp-new): the data path's encapsulation, `udp-new` (NPT 2), `udp-port` (NPT 1
# for UDP flows) or `dscp` (NPT 0; both move the bytes behind the INT point); a mode may name its
# own after an @ (MODES="md md@dscp md@udp-port").
#
# STAT_MODES (default "md"): the modes of the statistics runs, one each.
#
# H1_GSO=off limits h1 to one segment per GSO packet (gso_max_segs 1), in every run: h1 then sends MSS-sized packets,
# and every TCP packet carries INT (with the defaults most of the TCP stream is GSO and passes the
# source without INT; the source's counters at the end say how much).
#
# Needs root, iperf3, ping, bpftool, jq, python3 and an intscope built with its BPF programs.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${1:-5}"
secs="${2:-5}"
bin="$(realpath "${BIN:-target/release/intscope}")"
[ -x "$bin" ] || { echo "build first (cargo build --release -p intscope) or set BIN" >&2; exit 2; }
for t in ip iperf3 ping bpftool jq python3; do
  command -v "$t" >/dev/null || { echo "$t is needed" >&2; exit 2; }
done

p="ib$$"
work=$(mktemp -d)
pids=()
agent_pids=()
cleanup() {
  for a in "${agent_pids[@]}" "${pids[@]}"; do kill "$a" 2>/dev/null || true; done
  [ -s "$work/iperf3.pid" ] && kill "$(cat "$work/iperf3.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  for n in h1 r1 r2 r3 h2 mg; do ip netns del "$p$n" 2>/dev/null || true; done
  sysctl -qw kernel.bpf_stats_enabled="${stats_before:-0}" || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
stats_before=$(sysctl -n kernel.bpf_stats_enabled)

for n in h1 r1 r2 r3 h2 mg; do ip netns add "$p$n"; ip -n "$p$n" link set lo up; done
link() { ip link add "$2" netns "$p$1" type veth peer name "$4" netns "$p$3"; }
link h1 eth0 r1 h1
link r1 r2 r2 r1
link r2 r3 r3 r2
link r3 h2 h2 eth0
ip -n "${p}mg" link add br0 type bridge
ip -n "${p}mg" addr add 10.9.0.100/24 dev br0
ip -n "${p}mg" link set br0 up
i=1
for n in r1 r2 r3; do
  link "$n" mg mg "m$n"
  ip -n "${p}mg" link set "m$n" master br0 up
  ip -n "$p$n" addr add "10.9.0.$i/24" dev mg
  ip -n "$p$n" link set mg up
  i=$((i + 1))
done
addr() { ip -n "$p$1" addr add "$2" dev "$3"; ip -n "$p$1" link set "$3" up; }
addr h1 10.2.1.1/24 eth0
addr r1 10.2.1.254/24 h1
addr r1 10.2.2.1/30 r2
addr r2 10.2.2.2/30 r1
addr r2 10.2.3.1/30 r3
addr r3 10.2.3.2/30 r2
addr r3 10.2.4.254/24 h2
addr h2 10.2.4.1/24 eth0
for l in "r1 r2" "r2 r1" "r2 r3" "r3 r2"; do set -- $l; ip -n "$p$1" link set "$2" mtu 1600; done
ip -n "${p}h1" route add default via 10.2.1.254
ip -n "${p}r1" route add 10.2.4.0/24 via 10.2.2.2
ip -n "${p}r2" route add 10.2.1.0/24 via 10.2.2.1
ip -n "${p}r2" route add 10.2.4.0/24 via 10.2.3.2
ip -n "${p}r3" route add 10.2.1.0/24 via 10.2.3.1
ip -n "${p}h2" route add default via 10.2.4.254
for n in r1 r2 r3; do ip netns exec "$p$n" sysctl -qw net.ipv4.ip_forward=1; done
# One segment per GSO packet at most: the stack sends MSS-sized packets (no ethtool needed).
if [ "${H1_GSO:-on}" = off ]; then ip -n "${p}h1" link set eth0 gso_max_segs 1; fi

ip netns exec "${p}mg" "$bin" collect --listen 10.9.0.100:32766 --http 127.0.0.1:8080 --no-store \
  --int-udp-port 17768 >/dev/null 2>"$work/collect.err" &
pids+=($!)
ip netns exec "${p}h2" iperf3 -s -D -p 5201 --logfile "$work/iperf3.log" --pidfile "$work/iperf3.pid"
cat >"$work/udp.py" <<'EOF'
import socket, sys, time
if sys.argv[1] == "echo":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 7001))
    while True:
        d, a = s.recvfrom(2048); s.sendto(d, a)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1); s.connect((sys.argv[2], 7001))
rtts = []
for i in range(500):
    t = time.perf_counter_ns(); s.send(i.to_bytes(8, "big") * 8)
    try:
        s.recv(2048); rtts.append(time.perf_counter_ns() - t)
    except socket.timeout:
        pass
    time.sleep(0.002)
rtts.sort(); print("%.1f" % (rtts[len(rtts) // 2] / 1000))
EOF
ip netns exec "${p}h2" python3 "$work/udp.py" echo &
pids+=($!)
sleep 0.5

common=(--collector 10.9.0.100:32766 --watch-subnet 10.2.0.0/16)
read -r -a modes <<<"${MODES:-md mx}"
read -r -a stat_modes <<<"${STAT_MODES:-md}"
# Agents of mode $1: md or mx, "-every" for --every-packet, "@ENCAP" for an encapsulation.
start_agents() {
  local mode="${1%@*}" encap="${ENCAP:-udp-new}"
  [[ "$1" == *@* ]] && encap="${1#*@}"
  common=(--collector 10.9.0.100:32766 --watch-subnet 10.2.0.0/16)
  [ "${mode%-every}" != "$mode" ] && common+=(--every-packet)
  mode="${mode%-every}"
  local cfg="$work/$mode-$encap.toml"
  printf 'mode = "%s"\nmtu = 1600\nencap = "%s"\n' "$mode" "$encap" >"$cfg"
  ip netns exec "${p}r1" "$bin" agent --node-id 1 "${common[@]}" --config "$cfg" --interface h1 \
    --int-port r2=source >"$work/a-r1.json" 2>"$work/a-r1.err" &
  agent_pids+=($!)
  wait_attached r1
  ip netns exec "${p}r2" "$bin" agent --node-id 2 "${common[@]}" --config "$cfg" --interface r1 \
    --int-port r3=transit >"$work/a-r2.json" 2>"$work/a-r2.err" &
  agent_pids+=($!)
  wait_attached r2
  ip netns exec "${p}r3" "$bin" agent --node-id 3 "${common[@]}" --config "$cfg" --interface r2 \
    --int-port r2=sink >"$work/a-r3.json" 2>"$work/a-r3.err" &
  agent_pids+=($!)
  wait_attached r3
}
wait_attached() {
  for _ in $(seq 100); do grep -qs attached "$work/a-$1.err" && break; sleep 0.1; done
  grep -q attached "$work/a-$1.err" || { cat "$work/a-$1.err" >&2; exit 1; }
  # The programs this agent loaded, by the IDs its file descriptors hold (other agents on the
  # machine load programs of the same names): its role's, for the statistics run.
  grep -h '^prog_id:' /proc/"${agent_pids[-1]}"/fdinfo/* 2>/dev/null | awk '{ print $2 }' | sort -u |
    sed "s/$/ $1/" >>"$work/ids-role"
}
stop_agents() {
  kill -TERM "${agent_pids[@]}"
  wait "${agent_pids[@]}" 2>/dev/null || true
  agent_pids=()
  rm -f "$work"/a-*.err "$work/ids-role"
}

tcp() { ip netns exec "${p}h1" iperf3 -c 10.2.4.1 -p 5201 -t "$secs" -J | jq '.end.sum_received.bits_per_second / 1e9'; }
rtt() {
  ip netns exec "${p}h1" ping -n -q -i 0.002 -c 200 10.2.4.1 >/dev/null
  ip netns exec "${p}h1" ping -n -i 0.002 -c 500 10.2.4.1 |
    sed -n 's/.*time=\([0-9.]*\) ms/\1/p' | sort -n | awk '{ v[NR] = $1 } END { printf "%.1f\n", v[int((NR + 1) / 2)] * 1000 }'
}
urtt() { ip netns exec "${p}h1" python3 "$work/udp.py" client 10.2.4.1; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for f in base "${modes[@]}"; do : >"$work/$f-tcp"; : >"$work/$f-rtt"; : >"$work/$f-urtt"; done
measure() {
  local m=$1 a
  a=$(tcp); echo "round $r  $m  TCP $a Gbit/s"; echo "$a" >>"$work/$m-tcp"
  a=$(rtt); echo "round $r  $m  ICMP RTT p50 $a us"; echo "$a" >>"$work/$m-rtt"
  a=$(urtt); echo "round $r  $m  UDP RTT p50 $a us"; echo "$a" >>"$work/$m-urtt"
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  measure base
  for m in "${modes[@]}"; do
    start_agents "$m"
    measure "$m"
    stop_agents
  done
done

# The programs' own cost: one more run per STAT_MODES mode with the kernel's BPF statistics on.
sysctl -qw kernel.bpf_stats_enabled=1
for m in "${stat_modes[@]}"; do
  start_agents "$m"
  cp "$work/ids-role" "$work/ids-stats-$m"
  tcp >/dev/null
  urtt >/dev/null
  bpftool prog show -j | jq -r '.[] | select(.name | test("^(int_ingress|int_egress|on_xmit)$"))
    | [.id, .name, (.run_cnt // 0), (.run_time_ns // 0)] | @tsv' | sort -n >"$work/stats-$m"
  stop_agents
  cp "$work/a-r1.json" "$work/stats-$m-r1.json"
  cp "$work/a-r3.json" "$work/stats-$m-r3.json"
done
sysctl -qw kernel.bpf_stats_enabled="$stats_before"

bt=$(median <"$work/base-tcp"); br=$(median <"$work/base-rtt"); bu=$(median <"$work/base-urtt")
echo
echo "== medians of $rounds rounds (${secs} s TCP, 500 pings, 500 UDP echoes; h1 TSO/GSO ${H1_GSO:-on}), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "kernel forwarding   TCP $(printf %.2f "$bt") Gbit/s   ICMP RTT p50 $br us   UDP RTT p50 $bu us"
for m in "${modes[@]}"; do
  at=$(median <"$work/$m-tcp"); ar=$(median <"$work/$m-rtt"); au=$(median <"$work/$m-urtt")
  awk -v m="$m" -v b="$bt" -v a="$at" -v br="$br" -v ar="$ar" -v bu="$bu" -v au="$au" 'BEGIN {
    printf "INT-%-16s TCP %.2f Gbit/s = %.3f x   ICMP RTT p50 %.1f us (%+.1f)   UDP RTT p50 %.1f us (%+.1f)\n",
      toupper(m), a, a / b, ar, ar - br, au, au - bu }'
done
for m in "${stat_modes[@]}"; do
  echo "== BPF run time per call, INT-${m^^} (kernel.bpf_stats_enabled adds its own clock reads)"
  join <(sort -k1,1 "$work/ids-stats-$m") <(sort -k1,1 "$work/stats-$m") |
    awk '{ printf "%-3s %-12s %10d calls  %7.1f ns/call\n", $2, $3, $4, $4 ? $5 / $4 : 0 }' | sort
  echo "== r1 (source) and r3 (sink) counters of that run"
  jq -c '.agent | {int_seen, int_inserted, int_gso_skipped, int_too_big, int_unsupported_ip}' "$work/stats-$m-r1.json"
  jq -c '.agent | {int_sunk, int_events, int_ring_full, int_filtered, int_sink_deferred, int_sink_egress, int_reports, sent}' "$work/stats-$m-r3.json"
done
