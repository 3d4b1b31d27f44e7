#!/usr/bin/env bash
# Starts or stops ClickHouse servers for intscope's history, on loopback ports, each with its own
# config and data under DIR (nothing in /etc or /var is used, no root needed beyond the install).
#
#   scripts/clickhouse.sh start DIR [--shards N] [--replicas R] [--port P]
#                                        # N x R servers (default 1 x 1), HTTP ports P, P+1, ...
#                                        # (default 8123); R > 1 also starts ZooKeeper on P+300
#   scripts/clickhouse.sh stop DIR [--now]  # stops every server (and ZooKeeper) started in DIR
#                                        # (--now: kill -9 at once, for data about to be deleted)
#   scripts/clickhouse.sh url DIR        # the store value for `intscope collect --store clickhouse:`
#   scripts/clickhouse.sh kill DIR K     # kill -9 server K (shard K / R, replica K % R)
#   scripts/clickhouse.sh revive DIR K   # starts server K again (after `kill`)
#
# With more than one server they form one cluster named `intscope` (remote_servers in each
# config: N shards of R replicas each, `internal_replication` on, as intscope writes each shard's
# local tables itself), which `intscope collect --store clickhouse:URLS --cluster intscope` uses
# for its Distributed tables; with R > 1 the tables are ReplicatedMergeTree (each server's
# `{shard}` and `{replica}` macros are set, ZooKeeper runs from Debian's `zookeeper` package).
# Server K listens on HTTP P+K, native TCP P+100+K and interserver P+200+K. `start` returns once
# every server answers `SELECT 1` (or fails after 30 s with the server's log). Needs Debian's
# clickhouse-server (`apt-get install clickhouse-server clickhouse-client`), and `zookeeper`
# (with a Java runtime) for R > 1.
set -euo pipefail

usage() {
  sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

cmd="${1:-}"
dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || usage
shift 2
shards=1
replicas=1
port=8123
server_k=""
now=0
case "$cmd" in
  kill | revive) server_k="${1:-}"; [ -n "$server_k" ] || usage; shift ;;
esac
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) shards="$2"; shift 2 ;;
    --replicas) replicas="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --now) now=1; shift ;;
    *) usage ;;
  esac
done

server_bin() {
  # Debian ships /usr/bin/clickhouse (one binary) with clickhouse-server as a link to it.
  if command -v clickhouse-server >/dev/null 2>&1; then
    echo clickhouse-server
  elif [ -x /usr/sbin/clickhouse-server ]; then
    echo /usr/sbin/clickhouse-server
  else
    echo "clickhouse-server is not installed: apt-get install -y clickhouse-server clickhouse-client" >&2
    exit 1
  fi
}

remote_servers() {
  local n="$1" r="$2" base="$3"
  echo "  <remote_servers><intscope>"
  for ((i = 0; i < n; i++)); do
    echo "    <shard><internal_replication>true</internal_replication>"
    for ((j = 0; j < r; j++)); do
      echo "      <replica><host>127.0.0.1</host><port>$((base + 100 + i * r + j))</port></replica>"
    done
    echo "    </shard>"
  done
  echo "  </intscope></remote_servers>"
}

zookeeper_config() {
  local r="$1" base="$2"
  [ "$r" -gt 1 ] || return 0
  echo "  <zookeeper><node><host>127.0.0.1</host><port>$((base + 300))</port></node>"
  echo "    <session_timeout_ms>10000</session_timeout_ms></zookeeper>"
}

zk_ok() {
  local zport="$1" answer
  answer=$( (exec 3<>"/dev/tcp/127.0.0.1/$zport" && printf ruok >&3 && head -c 4 <&3) 2>/dev/null) || true
  [ "$answer" = imok ]
}

start_zookeeper() {
  local d="$1" zport="$2"
  mkdir -p "$d/data"
  printf '%s\n' "tickTime=500" "initLimit=10" "syncLimit=5" "dataDir=$d/data" \
    "clientPort=$zport" "clientPortAddress=127.0.0.1" "maxClientCnxns=0" \
    "admin.enableServer=false" "4lw.commands.whitelist=ruok" >"$d/zoo.cfg"
  { command -v java >/dev/null 2>&1 && [ -e /usr/share/java/zookeeper.jar ]; } || {
    echo "zookeeper is not installed: apt-get install -y zookeeper (it brings Java)" >&2
    exit 1
  }
  java -Xmx256m -cp "$d:/usr/share/java/zookeeper.jar" -Dzookeeper.log.dir="$d" \
    org.apache.zookeeper.server.ZooKeeperServerMain "$d/zoo.cfg" >"$d/zookeeper.log" 2>&1 </dev/null &
  echo $! >"$d/launcher.pid"
  for _ in $(seq 1 300); do
    zk_ok "$zport" && return 0
    sleep 0.1
  done
  echo "zookeeper on port $zport did not start; its log:" >&2
  tail -n 30 "$d/zookeeper.log" >&2 || true
  return 1
}

write_config() {
  local d="$1" i="$2" n="$3" r="$4" base="$5"
  mkdir -p "$d/data" "$d/tmp" "$d/user_files" "$d/log" "$d/format_schemas"
  cat >"$d/users.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>4000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
  </interval></default></quotas>
</yandex>
EOF
  cat >"$d/config.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$d/log/server.log</log><errorlog>$d/log/error.log</errorlog>
    <size>100M</size><count>2</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <http_port>$((base + i))</http_port>
  <tcp_port>$((base + 100 + i))</tcp_port>
  <interserver_http_port>$((base + 200 + i))</interserver_http_port>
  <interserver_http_host>127.0.0.1</interserver_http_host>
  <path>$d/data/</path>
  <tmp_path>$d/tmp/</tmp_path>
  <user_files_path>$d/user_files/</user_files_path>
  <format_schema_path>$d/format_schemas/</format_schema_path>
  <users_config>$d/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <max_concurrent_queries>100</max_concurrent_queries>
  <mark_cache_size>536870912</mark_cache_size>
  <uncompressed_cache_size>268435456</uncompressed_cache_size>
  <mlock_executable>false</mlock_executable>
  <builtin_dictionaries_reload_interval>3600</builtin_dictionaries_reload_interval>
  <macros><shard>$((i / r))</shard><replica>r$((i % r))</replica></macros>
$(remote_servers "$n" "$r" "$base")
$(zookeeper_config "$r" "$base")
</yandex>
EOF
}

wait_up() {
  local http="$1" d="$2"
  for _ in $(seq 1 300); do
    if curl -fsS "http://127.0.0.1:$http/?query=SELECT%201" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  echo "clickhouse on port $http did not start; its log:" >&2
  tail -n 30 "$d/log/error.log" "$d/log/stdout.log" >&2 || true
  return 1
}

start_server() {
  local d="$1"
  "$(server_bin)" --config-file="$d/config.xml" --pid-file="$d/server.pid" \
    >>"$d/log/stdout.log" 2>&1 </dev/null &
  echo $! >"$d/launcher.pid"
}

stop_pid() {
  local pidfile="$1" sig="$2" pid
  [ -e "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  kill "-$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

case "$cmd" in
  start)
    server_bin >/dev/null
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    echo "$port $shards $replicas" >"$dir/cluster"
    if [ "$replicas" -gt 1 ]; then
      start_zookeeper "$dir/zookeeper" $((port + 300))
    fi
    total=$((shards * replicas))
    for ((k = 0; k < total; k++)); do
      d="$dir/server$k"
      write_config "$d" "$k" "$shards" "$replicas" "$port"
      start_server "$d"
    done
    for ((k = 0; k < total; k++)); do
      wait_up $((port + k)) "$dir/server$k"
    done
    if [ "$replicas" -gt 1 ]; then
      # Replicated tables need each server's ZooKeeper session: wait until every one has it.
      for ((k = 0; k < total; k++)); do
        for i in $(seq 1 300); do
          curl -fsS "http://127.0.0.1:$((port + k))/" --data-binary \
            "SELECT count() FROM system.zookeeper WHERE path = '/'" >/dev/null 2>&1 && break
          [ "$i" = 300 ] && { echo "server $k did not reach ZooKeeper" >&2; exit 1; }
          sleep 0.1
        done
      done
    fi
    "$0" url "$dir"
    ;;
  stop)
    [ -d "$dir" ] || exit 0
    # Every server at once (each may take seconds to shut down), then ZooKeeper.
    sig=TERM
    [ "$now" = 1 ] && sig=KILL
    for pidfile in "$dir"/server*/launcher.pid; do
      [ -e "$pidfile" ] && stop_pid "$pidfile" "$sig" &
    done
    wait
    stop_pid "$dir/zookeeper/launcher.pid" "$sig"
    ;;
  kill)
    stop_pid "$dir/server$server_k/launcher.pid" KILL
    ;;
  revive)
    read -r p _ <"$dir/cluster"
    start_server "$dir/server$server_k"
    wait_up $((p + server_k)) "$dir/server$server_k"
    ;;
  url)
    read -r p n r <"$dir/cluster"
    r="${r:-1}"
    out=""
    for ((i = 0; i < n; i++)); do
      shard=""
      for ((j = 0; j < r; j++)); do
        shard="$shard${shard:+|}http://127.0.0.1:$((p + i * r + j))"
      done
      out="$out${out:+,}$shard"
    done
    echo "$out"
    ;;
  *) usage ;;
esac
