#!/usr/bin/env bash
# Runs the peers the benchmarks compare Leasehold with, on loopback only:
#   etcd 3.4      on 127.0.0.1:2379 (WAL fsynced on every commit, its default)
#                 and a second over TLS on 127.0.0.1:2479 (`--peer etcd-tls`),
#                 its certificate signed by a CA made here with openssl,
#                 $STATE/tls/ca.pem
#   ZooKeeper 3.8 on 127.0.0.1:2181 (forceSync=yes, its default)
# each with its data in a fresh temporary directory; or, for the cell
# benchmarks (`leasehold-bench --cell`), their clusters:
#   etcd 3.4      three members, clients on 127.0.0.1:12379, :22379, :32379
#                 (peers on the next port up: 12380, 22380, 32380)
#   ZooKeeper 3.8 three servers, clients on 127.0.0.1:12181, :12182, :12183
#                 (quorum 12888-12890, election 13888-13890), each JVM
#                 with -Xmx2g (LEASEHOLD_PEERS_ZK_HEAP)
#
#   bench/peers/start.sh start          install what is missing (Debian
#                                       packages, and protoc for the etcd
#                                       client's build), start both, wait
#                                       until they serve
#   bench/peers/start.sh stop           stop both by PID and remove their data
#   bench/peers/start.sh start-cluster  the same for both clusters, waiting
#                                       until each has a leader
#   bench/peers/start.sh stop-cluster
#   bench/peers/start.sh status         both kinds; a cluster member's role
#
# The benchmark's `failover` scenario kills a peer (a cluster's leader) and
# starts it again from the same command line, so `stop` and `stop-cluster`
# also stop whatever process now serves the peer's ports.
set -euo pipefail

STATE=${LEASEHOLD_PEERS_DIR:-/tmp/leasehold-peers}
ETCD_PORT=2379
ETCD_PEER_PORT=2380
ETCD_TLS_PORT=2479
ETCD_TLS_PEER_PORT=2480
ZK_PORT=2181

CLUSTER=${LEASEHOLD_PEERS_CLUSTER_DIR:-/tmp/leasehold-peers-cluster}
# Client ports; each etcd member's peer port is its client port + 1.
ETCD_CLUSTER_PORTS=(12379 22379 32379)
ZK_CLUSTER_PORTS=(12181 12182 12183)
ZK_QUORUM_PORTS=(12888 12889 12890)
ZK_ELECTION_PORTS=(13888 13889 13890)
ZK_HEAP=${LEASEHOLD_PEERS_ZK_HEAP:-2g}

install() {
    local missing=()
    command -v etcd >/dev/null || missing+=(etcd-server)
    [ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
    command -v java >/dev/null || missing+=(default-jre-headless)
    command -v protoc >/dev/null || missing+=(protobuf-compiler)
    command -v openssl >/dev/null || missing+=(openssl)
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

# Waits until 127.0.0.1:$1 accepts connections; $3 is the log to show if
# it never does.
wait_for_port() {
    local port=$1 name=$2 log=${3:-$STATE/$2.log}
    for _ in $(seq 1 300); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$name serving on 127.0.0.1:$port"
            return 0
        fi
        sleep 0.1
    done
    echo "$name did not start; its log:" >&2
    tail -20 "$log" >&2 || true
    return 1
}

# What the ZooKeeper server on port $1 says of its role (the four-letter
# word srvr): leader, follower, standalone, or nothing while it cannot serve.
zk_mode() {
    local reply
    reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && timeout 1 cat <&3) 2>/dev/null) || true
    sed -n 's/^Mode: //p' <<<"$reply"
}

# What the etcd member with client port $1 says of its role (the
# Maintenance API's Status, as `etcdctl endpoint status` asks it): leader,
# follower, or nothing when it cannot be asked.
etcd_role() {
    local reply me leader
    command -v curl >/dev/null || return 0
    reply=$(curl -s -m 1 -X POST -d '{}' "http://127.0.0.1:$1/v3/maintenance/status") || return 0
    me=$(grep -o '"member_id":"[0-9]*"' <<<"$reply" | grep -o '[0-9][0-9]*') || return 0
    leader=$(grep -o '"leader":"[0-9]*"' <<<"$reply" | grep -o '[0-9][0-9]*') || return 0
    if [ "$me" = "$leader" ]; then echo leader; else echo follower; fi
}

# Stops the process the pid file $1 names and whatever listens on the
# ports after it, SIGTERM first, then SIGKILL after 5 s.
stop_by() {
    local pidfile=$1
    shift
    local pids
    pids="$(cat "$pidfile" 2>/dev/null || true)"
    for port in "$@"; do pids+=" $(listener "$port")"; done
    for pid in $pids; do
        kill "$pid" 2>/dev/null || true
    done
    for _ in $(seq 1 50); do
        local left=""
        for port in "$@"; do left+="$(listener "$port")"; done
        [ -z "$left" ] && break
        sleep 0.1
    done
    for port in "$@"; do pids+=" $(listener "$port")"; done
    for pid in $pids; do
        kill -9 "$pid" 2>/dev/null || true
    done
}

# Starts a one-member etcd named $1 whose client URL speaks $2 (http or
# https) on port $3, peers on port $4, with the flags after them; its data,
# log and pid under $STATE, named after it.
launch_etcd() {
    local name=$1 scheme=$2 port=$3 peer=$4
    shift 4
    nohup etcd --name "$name" --data-dir "$STATE/${name/bench/etcd}" \
        --listen-client-urls "$scheme://127.0.0.1:$port" \
        --advertise-client-urls "$scheme://127.0.0.1:$port" \
        --listen-peer-urls "http://127.0.0.1:$peer" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "$name=http://127.0.0.1:$peer" \
        --log-level warn "$@" \
        >"$STATE/${name/bench/etcd}.log" 2>&1 &
    echo $! >"$STATE/${name/bench/etcd}.pid"
}

start() {
    install
    for port in $ETCD_PORT $ETCD_TLS_PORT $ZK_PORT; do
        if [ -n "$(listener $port)" ]; then
            echo "port $port is already in use: run '$0 stop' first" >&2
            exit 1
        fi
    done
    rm -rf "$STATE"
    mkdir -p "$STATE/etcd" "$STATE/etcd-tls" "$STATE/zookeeper/data" "$STATE/tls"

    launch_etcd bench http $ETCD_PORT $ETCD_PEER_PORT

    # The same etcd over TLS, with a P-256 certificate as the benchmark's
    # Leasehold master has: what TLS costs etcd.
    local tls=$STATE/tls ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
    openssl req -x509 "${ec[@]}" -days 30 -subj /CN=bench-ca \
        -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
    openssl req "${ec[@]}" -subj /CN=etcd -keyout "$tls/etcd.key" -out "$tls/etcd.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$tls/etcd.ext"
    openssl x509 -req -in "$tls/etcd.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
        -days 30 -extfile "$tls/etcd.ext" -out "$tls/etcd.pem" 2>/dev/null
    launch_etcd bench-tls https $ETCD_TLS_PORT $ETCD_TLS_PEER_PORT \
        --cert-file "$tls/etcd.pem" --key-file "$tls/etcd.key"

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
    wait_for_port $ETCD_TLS_PORT etcd-tls
    wait_for_port $ZK_PORT zookeeper
}

stop() {
    stop_by "$STATE/etcd.pid" $ETCD_PORT
    echo "etcd stopped"
    stop_by "$STATE/etcd-tls.pid" $ETCD_TLS_PORT
    echo "etcd-tls stopped"
    stop_by "$STATE/zookeeper.pid" $ZK_PORT
    echo "zookeeper stopped"
    rm -rf "$STATE"
}

start_cluster() {
    install
    for port in "${ETCD_CLUSTER_PORTS[@]}" "${ZK_CLUSTER_PORTS[@]}"; do
        if [ -n "$(listener "$port")" ]; then
            echo "port $port is already in use: run '$0 stop-cluster' first" >&2
            exit 1
        fi
    done
    rm -rf "$CLUSTER"
    mkdir -p "$CLUSTER"

    local initial="" i port
    for i in 1 2 3; do
        port=${ETCD_CLUSTER_PORTS[i - 1]}
        initial+="${initial:+,}m$i=http://127.0.0.1:$((port + 1))"
    done
    for i in 1 2 3; do
        port=${ETCD_CLUSTER_PORTS[i - 1]}
        mkdir -p "$CLUSTER/etcd-$i"
        nohup etcd --name "m$i" --data-dir "$CLUSTER/etcd-$i" \
            --listen-client-urls "http://127.0.0.1:$port" \
            --advertise-client-urls "http://127.0.0.1:$port" \
            --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
            --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
            --initial-cluster "$initial" \
            --initial-cluster-token leasehold-bench \
            --initial-cluster-state new \
            --log-level warn \
            >"$CLUSTER/etcd-$i.log" 2>&1 &
        echo $! >"$CLUSTER/etcd-$i.pid"
    done

    for i in 1 2 3; do
        local dir="$CLUSTER/zookeeper-$i"
        mkdir -p "$dir/data"
        echo "$i" >"$dir/data/myid"
        {
            cat <<CFG
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=${ZK_CLUSTER_PORTS[i - 1]}
clientPortAddress=127.0.0.1
maxClientCnxns=0
forceSync=yes
admin.enableServer=false
4lw.commands.whitelist=srvr
CFG
            for j in 1 2 3; do
                echo "server.$j=127.0.0.1:${ZK_QUORUM_PORTS[j - 1]}:${ZK_ELECTION_PORTS[j - 1]}"
            done
        } >"$dir/zoo.cfg"
        nohup java "-Xmx$ZK_HEAP" -cp "/usr/share/java/zookeeper.jar" \
            -Dzookeeper.log.dir="$dir" \
            org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
            >"$CLUSTER/zookeeper-$i.log" 2>&1 &
        echo $! >"$CLUSTER/zookeeper-$i.pid"
    done

    for i in 1 2 3; do
        wait_for_port "${ETCD_CLUSTER_PORTS[i - 1]}" "etcd member $i" "$CLUSTER/etcd-$i.log"
    done
    for i in 1 2 3; do
        wait_for_port "${ZK_CLUSTER_PORTS[i - 1]}" "zookeeper server $i" "$CLUSTER/zookeeper-$i.log"
    done
    # Listening comes before a leader: wait for one in each (60 s at most).
    local etcd_leader="" zk_leader=""
    for _ in $(seq 1 600); do
        for i in 1 2 3; do
            [ "$(etcd_role "${ETCD_CLUSTER_PORTS[i - 1]}")" = leader ] && etcd_leader=$i
            [ "$(zk_mode "${ZK_CLUSTER_PORTS[i - 1]}")" = leader ] && zk_leader=$i
        done
        [ -n "$etcd_leader" ] && [ -n "$zk_leader" ] && break
        sleep 0.1
    done
    if [ -z "$etcd_leader" ] || [ -z "$zk_leader" ]; then
        echo "no leader within 60 s (etcd: ${etcd_leader:-none}, zookeeper: ${zk_leader:-none})" >&2
        exit 1
    fi
    echo "etcd cluster led by member $etcd_leader, zookeeper ensemble by server $zk_leader"
}

stop_cluster() {
    local i
    for i in 1 2 3; do
        stop_by "$CLUSTER/etcd-$i.pid" "${ETCD_CLUSTER_PORTS[i - 1]}" "$((ETCD_CLUSTER_PORTS[i - 1] + 1))"
    done
    echo "etcd cluster stopped"
    for i in 1 2 3; do
        stop_by "$CLUSTER/zookeeper-$i.pid" "${ZK_CLUSTER_PORTS[i - 1]}" \
            "${ZK_QUORUM_PORTS[i - 1]}" "${ZK_ELECTION_PORTS[i - 1]}"
    done
    echo "zookeeper ensemble stopped"
    rm -rf "$CLUSTER"
}

status() {
    local port pid role
    for port in $ETCD_PORT $ETCD_TLS_PORT $ZK_PORT "${ETCD_CLUSTER_PORTS[@]}" "${ZK_CLUSTER_PORTS[@]}"; do
        pid=$(listener "$port")
        if [ -z "$pid" ]; then
            echo "127.0.0.1:$port not serving"
            continue
        fi
        role=""
        case " ${ETCD_CLUSTER_PORTS[*]} " in *" $port "*) role=$(etcd_role "$port") ;; esac
        case " ${ZK_CLUSTER_PORTS[*]} " in *" $port "*) role=$(zk_mode "$port") ;; esac
        echo "127.0.0.1:$port served by pid $pid${role:+ ($role)}"
    done
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    start-cluster) start_cluster ;;
    stop-cluster) stop_cluster ;;
    status) status ;;
    *) echo "usage: $0 start|stop|start-cluster|stop-cluster|status" >&2; exit 2 ;;
esac
