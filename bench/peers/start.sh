#!/usr/bin/env bash
# Runs the peers the benchmarks compare Leasehold with, on loopback only:
#   etcd 3.4      on 127.0.0.1:2379 (WAL fsynced on every commit, its default)
#   ZooKeeper 3.8 on 127.0.0.1:2181 (forceSync=yes, its default)
# each with its data in a fresh temporary directory.
#
#   bench/peers/start.sh start    install what is missing (Debian packages,
#                                 and protoc for the etcd client's build),
#                                 start both, wait until they serve
#   bench/peers/start.sh stop     stop both by PID and remove their data
#   bench/peers/start.sh status
#
# The benchmark's `failover` scenario kills a peer and starts it again from
# the same command line, so `stop` also stops whatever process now serves
# the peer's port.
set -euo pipefail

STATE=${LEASEHOLD_PEERS_DIR:-/tmp/leasehold-peers}
ETCD_PORT=2379
ETCD_PEER_PORT=2380
ZK_PORT=2181

install() {
    local missing=()
    command -v etcd >/dev/null || missing+=(etcd-server)
    [ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
    command -v java >/dev/null || missing+=(default-jre-headless)
    command -v protoc >/dev/null || missing+=(protobuf-compiler)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# The PID of the process listening on TCP port $1 on loopback, if any.
listener() {
    ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true
}

wait_for_port() {
    local port=$1 name=$2
    for _ in $(seq 1 300); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$name serving on 127.0.0.1:$port"
            return 0
        fi
        sleep 0.1
    done
    echo "$name did not start; its log:" >&2
    tail -20 "$STATE/$name.log" >&2 || true
    return 1
}

start() {
    install
    for port in $ETCD_PORT $ZK_PORT; do
        if [ -n "$(listener $port)" ]; then
            echo "port $port is already in use: run '$0 stop' first" >&2
            exit 1
        fi
    done
    rm -rf "$STATE"
    mkdir -p "$STATE/etcd" "$STATE/zookeeper/data"

    nohup etcd --name bench --data-dir "$STATE/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "bench=http://127.0.0.1:$ETCD_PEER_PORT" \
        --log-level warn \
        >"$STATE/etcd.log" 2>&1 &
    echo $! >"$STATE/etcd.pid"

    cat >"$STATE/zookeeper/zoo.cfg" <<CFG
tickTime=2000
dataDir=$STATE/zookeeper/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
forceSync=yes
admin.enableServer=false
CFG
    nohup java -Xmx4g -cp "/usr/share/java/zookeeper.jar" \
        -Dzookeeper.log.dir="$STATE/zookeeper" \
        org.apache.zookeeper.server.ZooKeeperServerMain "$STATE/zookeeper/zoo.cfg" \
        >"$STATE/zookeeper.log" 2>&1 &
    echo $! >"$STATE/zookeeper.pid"

    wait_for_port $ETCD_PORT etcd
    wait_for_port $ZK_PORT zookeeper
}

stop() {
    for name in etcd zookeeper; do
        local port
        [ $name = etcd ] && port=$ETCD_PORT || port=$ZK_PORT
        local pids
        pids="$(cat "$STATE/$name.pid" 2>/dev/null || true) $(listener $port)"
        for pid in $pids; do
            kill "$pid" 2>/dev/null || true
        done
        for _ in $(seq 1 50); do
            [ -z "$(listener $port)" ] && break
            sleep 0.1
        done
        for pid in $pids $(listener $port); do
            kill -9 "$pid" 2>/dev/null || true
        done
        echo "$name stopped"
    done
    rm -rf "$STATE"
}

status() {
    for port in $ETCD_PORT $ZK_PORT; do
        local pid
        pid=$(listener $port)
        if [ -n "$pid" ]; then
            echo "127.0.0.1:$port served by pid $pid"
        else
            echo "127.0.0.1:$port not serving"
        fi
    done
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
