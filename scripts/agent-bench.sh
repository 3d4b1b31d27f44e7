#!/usr/bin/env bash
# The host INT agent's cost on a real data path: TCP throughput and ping RTT from h1 to h2
# through two Linux routers (h1 — r1 — r2 — h2, network namespaces, kernel routing, default veth
# offloads): without an agent; with one agent watching all four namespaces (`--netns`, as one
# agent per host would: one program run per packet); and with an agent in each namespace (four
# program runs per packet, three returning at the namespace check). Interleaved round by round
# so all see the same machine; then the BPF programs' own run time per call
# (kernel.bpf_stats_enabled, bpftool's run_time_ns / run_cnt), one agent for the four.
#
#   sudo scripts/agent-bench.sh [ROUNDS] [SECONDS]      # default 5 rounds of 5 s
#
# BIN=path: the intscope to measure (default target/release/intscope). BASE_BIN=path: a second
# build (an earlier commit) measured in the same rounds as one more mode, `base`, and in the
# statistics run, so a change is compared with what it changes on the same machine at the same
# time. MODES="one each" (default): which agent layouts the rounds run.
#
# Prints one line per round and measurement, then a summary (medians, same-run ratios) and the
# load average. Needs root, iperf3, ping, bpftool, jq and `cargo build --release -p intscope`.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${1:-5}"
secs="${2:-5}"
bin="$(realpath "${BIN:-target/release/intscope}")"
[ -x "$bin" ] || { echo "build first (cargo build --release -p intscope) or set BIN" >&2; exit 2; }
base_bin=""
if [ -n "${BASE_BIN:-}" ]; then
  base_bin="$(realpath "$BASE_BIN")"
  [ -x "$base_bin" ] || { echo "BASE_BIN $BASE_BIN is not an executable" >&2; exit 2; }
fi
read -r -a modes <<<"${MODES:-one each}"
[ -n "$base_bin" ] && modes=(base "${modes[@]}")
for t in ip iperf3 ping bpftool jq; do
  command -v "$t" >/dev/null || { echo "$t is needed" >&2; exit 2; }
done

p="ib$$"
work=$(mktemp -d)
agents=()
cleanup() {
  for a in "${agents[@]}"; do kill "$a" 2>/dev/null || true; done
  # The iperf3 server daemonized: its namespace going does not end it.
  [ -s "$work/iperf3.pid" ] && kill "$(cat "$work/iperf3.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  for n in h1 r1 r2 h2 mg; do ip netns del "$p$n" 2>/dev/null || true; done
  sysctl -qw kernel.bpf_stats_enabled="${stats_before:-0}" || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
stats_before=$(sysctl -n kernel.bpf_stats_enabled)

for n in h1 r1 r2 h2 mg; do ip netns add "$p$n"; ip -n "$p$n" link set lo up; done
link() { ip link add "$2" netns "$p$1" type veth peer name "$4" netns "$p$3"; }
link h1 eth0 r1 h1
link r1 r2 r2 r1
link r2 h2 h2 eth0
ip -n "${p}mg" link add br0 type bridge
ip -n "${p}mg" addr add 10.9.0.100/24 dev br0
ip -n "${p}mg" link set br0 up
i=1
for n in h1 r1 r2 h2; do
  link "$n" mg mg "m$n"
  ip -n "${p}mg" link set "m$n" master br0 up
  ip -n "$p$n" addr add "10.9.0.$i/24" dev mg
  ip -n "$p$n" link set mg up
  i=$((i + 1))
done
addr() { ip -n "$p$1" addr add "$2" dev "$3"; ip -n "$p$1" link set "$3" up; }
addr h1 10.1.1.1/24 eth0
addr r1 10.1.1.254/24 h1
addr r1 10.1.2.1/30 r2
addr r2 10.1.2.2/30 r1
addr r2 10.1.3.254/24 h2
addr h2 10.1.3.1/24 eth0
ip -n "${p}h1" route add default via 10.1.1.254
ip -n "${p}r1" route add 10.1.3.0/24 via 10.1.2.2
ip -n "${p}r2" route add 10.1.1.0/24 via 10.1.2.1
ip -n "${p}h2" route add default via 10.1.3.254
ip netns exec "${p}r1" sysctl -qw net.ipv4.ip_forward=1
ip netns exec "${p}r2" sysctl -qw net.ipv4.ip_forward=1

# A collector, so the reports are decoded as in a deployment (its CPU is part of the cost).
ip netns exec "${p}mg" "$bin" collect --listen 10.9.0.100:32766 --http 127.0.0.1:8080 --no-store \
  >/dev/null 2>"$work/collect.err" &
agents+=($!)
ip netns exec "${p}h2" iperf3 -s -D -p 5201 --logfile "$work/iperf3.log" --pidfile "$work/iperf3.pid"
sleep 0.5

watch=(--collector 10.9.0.100:32766 --watch-subnet 10.1.0.0/16 --interface eth0 --interface h1
  --interface h2 --interface r1 --interface r2)
# start_agents each: an agent per namespace; start_agents one: one agent for the four;
# start_agents base: one agent for the four, of BASE_BIN.
start_agents() {
  local i=1 n started=() b="$bin"
  [ "$1" = base ] && b="$base_bin"
  if [ "$1" = one ] || [ "$1" = base ]; then
    ip netns exec "${p}mg" "$b" agent "${watch[@]}" --netns "${p}h1=1" --netns "${p}r1=2" \
      --netns "${p}r2=3" --netns "${p}h2=4" >"$work/agent-all.json" 2>"$work/agent-all.err" &
    agent_pids+=($!)
    started=(all)
  else
    for n in h1 r1 r2 h2; do
      ip netns exec "$p$n" "$bin" agent --node-id "$i" "${watch[@]}" \
        >"$work/agent-$n.json" 2>"$work/agent-$n.err" &
      agent_pids+=($!)
      started+=("$n")
      i=$((i + 1))
    done
  fi
  for n in "${started[@]}"; do
    for _ in $(seq 100); do grep -q attached "$work/agent-$n.err" && break; sleep 0.1; done
    grep -q attached "$work/agent-$n.err" || { cat "$work/agent-$n.err" >&2; exit 1; }
  done
}
stop_agents() {
  kill -TERM "${agent_pids[@]}"
  wait "${agent_pids[@]}" 2>/dev/null || true
  agent_pids=()
  rm -f "$work"/agent-*.err
}

tcp() { ip netns exec "${p}h1" iperf3 -c 10.1.3.1 -p 5201 -t "$secs" -J | jq '.end.sum_received.bits_per_second / 1e9'; }
# 500 pings 2 ms apart: the median RTT in microseconds.
rtt() {
  ip netns exec "${p}h1" ping -n -q -i 0.002 -c 500 10.1.3.1 >/dev/null
  ip netns exec "${p}h1" ping -n -i 0.002 -c 500 10.1.3.1 |
    sed -n 's/.*time=\([0-9.]*\) ms/\1/p' | sort -n | awk '{ v[NR] = $1 } END { printf "%.1f\n", v[int((NR + 1) / 2)] * 1000 }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

agent_pids=()
for f in kernel base one each; do : >"$work/$f-tcp"; : >"$work/$f-rtt"; done
for r in $(seq "$rounds"); do
  b=$(tcp); echo "round $r  kernel forwarding        TCP $b Gbit/s"; echo "$b" >>"$work/kernel-tcp"
  b=$(rtt); echo "round $r  kernel forwarding        RTT p50 $b us"; echo "$b" >>"$work/kernel-rtt"
  for mode in "${modes[@]}"; do
    start_agents "$mode"
    a=$(tcp); echo "round $r  agents ($mode)  TCP $a Gbit/s"; echo "$a" >>"$work/$mode-tcp"
    a=$(rtt); echo "round $r  agents ($mode)  RTT p50 $a us"; echo "$a" >>"$work/$mode-rtt"
    stop_agents
  done
done

# The programs' own cost: STAT_RUNS (default 1) more runs with the kernel's BPF statistics on,
# each with one agent (and one with BASE_BIN's programs before it, if given); per program the
# median of the runs' run_time_ns / run_cnt.
sysctl -qw kernel.bpf_stats_enabled=1
stat_modes=(one)
[ -n "$base_bin" ] && stat_modes=(base one)
for _ in $(seq "${STAT_RUNS:-1}"); do
  for mode in "${stat_modes[@]}"; do
    start_agents "$mode"
    tcp >/dev/null
    ip netns exec "${p}h1" ping -n -q -i 0.002 -c 500 10.1.3.1 >/dev/null
    # This agent's programs, by the IDs its file descriptors hold (other agents on the machine
    # have programs of the same names).
    ids=$(grep -h '^prog_id:' /proc/"${agent_pids[0]}"/fdinfo/* 2>/dev/null | awk '{ print $2 }' | sort -u | paste -sd, -)
    bpftool prog show -j | jq -r --arg ids "$ids" '($ids | split(",") | map(tonumber)) as $mine | .[]
      | select((.id as $i | $mine | index($i)) and (.name == "on_receive" or .name == "on_transmit" or .name == "on_drop"))
      | [.name, (.run_cnt // 0), (.run_time_ns // 0)] | @tsv' |
      awk '{ c[$1] += $2; t[$1] += $3 } END { for (n in c) printf "%s %d %.1f\n", n, c[n], c[n] ? t[n] / c[n] : 0 }' \
      >>"$work/stats-$mode"
    stop_agents
    cp "$work/agent-all.json" "$work/agent-all-$mode.json"
  done
done
sysctl -qw kernel.bpf_stats_enabled="$stats_before"
reports=$(jq '.agent.events + .agent.drop_events' "$work/agent-all-one.json")
filtered=$(jq '.agent.filtered' "$work/agent-all-one.json")

echo
echo "== load $(cut -d' ' -f1-3 /proc/loadavg)"
# ROUNDS 0: the statistics runs alone.
if [ "$rounds" -gt 0 ]; then
  bt=$(median <"$work/kernel-tcp"); br=$(median <"$work/kernel-rtt")
  echo "== medians of $rounds rounds (${secs} s TCP, 500 pings)"
  echo "kernel forwarding            TCP $(printf %.2f "$bt") Gbit/s   RTT p50 $br us"
  for mode in "${modes[@]}"; do
    at=$(median <"$work/$mode-tcp"); ar=$(median <"$work/$mode-rtt")
    awk -v m="$mode" -v b="$bt" -v a="$at" -v br="$br" -v ar="$ar" 'BEGIN {
      printf "agents (%-4s)                TCP %.2f Gbit/s = %.3f x   RTT p50 %.1f us = +%.1f us\n", m, a, a / b, ar, ar - br }'
  done
fi
echo "== stats run (one agent): $reports events to userspace, $filtered packets held back by the filters"
echo "== BPF run time per call (with kernel.bpf_stats_enabled, which adds its own clock reads)"
for mode in "${stat_modes[@]}"; do
  for prog in on_receive on_transmit on_drop; do
    awk -v n="$prog" '$1 == n { print $3, $2 }' "$work/stats-$mode" | sort -n |
      awk -v m="$mode" -v n="$prog" '{ v[NR] = $1; c[NR] = $2 } END { if (NR) printf "%-4s %-12s %6.1f ns/call (median of %d runs: %s calls in the median run)\n", m, n, v[int((NR + 1) / 2)], NR, c[int((NR + 1) / 2)] }'
  done
done
