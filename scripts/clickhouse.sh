#!/usr/bin/env bash
# Starts or stops ClickHouse servers for intscope's history, on loopback ports, each with its own
# config and data under DIR (nothing in /etc or /var is used, no root needed beyond the install).
#
#   scripts/clickhouse.sh start DIR [--shards N] [--port P]   # N servers (default 1), HTTP ports
#                                                            # P, P+1, ... (default 8123)
#   scripts/clickhouse.sh stop DIR                           # stops every server started in DIR
#   scripts/clickhouse.sh url DIR                            # the store URL for `intscope collect`
#
# With N > 1 the servers form one cluster named `intscope` (remote_servers in each config: one
# shard per server, no replicas), which `intscope collect --store clickhouse:URL --cluster intscope`
# uses for its Distributed tables. Server i listens on HTTP P+i, native TCP P+100+i and
# interserver P+200+i. `start` returns once every server answers `SELECT 1` (or fails after 30 s
# with the server's log). Needs Debian's clickhouse-server (`apt-get install clickhouse-server
# clickhouse-client`).
set -euo pipefail

usage() {
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

cmd="${1:-}"
dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || usage
shift 2
shards=1
port=8123
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) shards="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
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
  local n="$1" base="$2"
  echo "  <remote_servers><intscope>"
  for ((i = 0; i < n; i++)); do
    echo "    <shard><replica><host>127.0.0.1</host><port>$((base + 100 + i))</port></replica></shard>"
  done
  echo "  </intscope></remote_servers>"
}

write_config() {
  local d="$1" i="$2" n="$3" base="$4"
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
$(remote_servers "$n" "$base")
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

case "$cmd" in
  start)
    bin=$(server_bin)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    echo "$port $shards" >"$dir/cluster"
    for ((i = 0; i < shards; i++)); do
      d="$dir/shard$i"
      write_config "$d" "$i" "$shards" "$port"
      "$bin" --config-file="$d/config.xml" --pid-file="$d/server.pid" \
        >"$d/log/stdout.log" 2>&1 </dev/null &
      echo $! >"$d/launcher.pid"
    done
    for ((i = 0; i < shards; i++)); do
      wait_up $((port + i)) "$dir/shard$i"
    done
    echo "http://127.0.0.1:$port"
    ;;
  stop)
    [ -d "$dir" ] || exit 0
    for pidfile in "$dir"/shard*/launcher.pid; do
      [ -e "$pidfile" ] || continue
      pid=$(cat "$pidfile")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$pidfile"
    done
    ;;
  url)
    read -r p _ <"$dir/cluster"
    echo "http://127.0.0.1:$p"
    ;;
  *) usage ;;
esac
