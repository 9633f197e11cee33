#!/usr/bin/env bash
# cluster.sh: a local three-node RabbitMQ cluster for quorum queues, beside
# (never instead of) the lab's single node rabbit@localhost on port 5672.
#
#   scripts/cluster.sh up            start the nodes that are not running; cluster them
#   scripts/cluster.sh status        each node's state, and the cluster's membership
#   scripts/cluster.sh kill N        SIGKILL node N's Erlang VM: a crash, not a stop
#   scripts/cluster.sh start N       start node N again; it rejoins the cluster
#   scripts/cluster.sh down          stop all three; their data stays
#   scripts/cluster.sh down --purge  stop all three and delete their data
#
# Node N (1, 2, 3) is eaimqN@localhost: AMQP on 127.0.0.1:568N, Erlang
# distribution on 2568N, data (mnesia, quorum queue logs, pid file) under
# /var/lib/rabbitmq/eaimq-cluster/N, log in /var/log/rabbitmq/eaimqN@localhost.log.
# Each has scripts/rabbitmq.conf with its own port: loopback listener only,
# the absolute 512MiB watermark, guest over loopback. Nodes 2 and 3 join
# node 1 (stop_app, join_cluster, start_app). up is safe to run any number
# of times: a running, clustered node is left alone.
#
# Installs rabbitmq-server from Debian when missing, as mq-up.sh does.
# Needs root, as the server runs as the rabbitmq user.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
base=${EAIMQ_CLUSTER_DIR:-/var/lib/rabbitmq/eaimq-cluster}
wait_s=${EAIMQ_BROKER_WAIT:-120}
nodes=(1 2 3)

say() { echo "cluster: $*"; }
die() { echo "cluster: $*" >&2; exit 1; }

node() { echo "eaimq$1@localhost"; }
port() { echo $((5680 + $1)); }
ctl() { local n=$1; shift; rabbitmqctl -n "$(node "$n")" "$@"; }

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$(port "$1")") 2>/dev/null; }
running() { ctl "$1" -q eval 'node().' >/dev/null 2>&1; }
# The app, not only the VM: between stop_app and start_app the VM answers.
app_running() { ctl "$1" -q eval 'rabbit:is_running().' 2>/dev/null | grep -qx true; }

check_n() {
	case ${1:-} in
	1 | 2 | 3) ;;
	*) die "node number must be 1, 2 or 3, not '${1:-}'" ;;
	esac
}

. "$here/lib/apt.sh" # apt_install, and the trap that cleans up after it

# ensure_installed installs rabbitmq-server from Debian as mq-up.sh does
# (not by running mq-up.sh: that would also start rabbit@localhost, which
# this script never touches).
ensure_installed() {
	if command -v rabbitmq-server >/dev/null && command -v rabbitmqctl >/dev/null; then
		return
	fi
	say "rabbitmq-server is not installed; installing it from Debian"
	apt_install rabbitmq-server
	command -v rabbitmq-server >/dev/null || die "rabbitmq-server still missing after apt-get install"
}

start_node() {
	local n=$1 dir="$base/$1"
	if running "$n"; then
		return
	fi
	if answers "$n"; then
		die "something other than $(node "$n") answers on 127.0.0.1:$(port "$n")"
	fi
	[ "$(id -u)" -eq 0 ] || die "starting a node needs root (the server runs as the rabbitmq user)"
	# The config and data must be the rabbitmq user's, whom the server
	# drops to.
	mkdir -p "$dir"
	sed "s/127.0.0.1:5672/127.0.0.1:$(port "$n")/" "$here/rabbitmq.conf" >"$dir/rabbitmq.conf"
	chown -R rabbitmq:rabbitmq "$base"
	# No ERL_EPMD_ADDRESS: epmd must answer at the address the host name
	# resolves to, where the nodes look up rabbitmqctl's own node (see
	# mq-up.sh).
	say "starting $(node "$n") on 127.0.0.1:$(port "$n") (data $dir)"
	RABBITMQ_NODENAME=$(node "$n") \
		RABBITMQ_CONFIG_FILE="$dir/rabbitmq" \
		RABBITMQ_NODE_PORT=$(port "$n") \
		RABBITMQ_DIST_PORT=$((20000 + $(port "$n"))) \
		RABBITMQ_MNESIA_BASE="$dir" \
		rabbitmq-server -detached
}

await_node() {
	local n=$1 deadline=$((SECONDS + wait_s))
	until answers "$n" && ctl "$n" -q await_startup >/dev/null 2>&1; do
		if [ $SECONDS -ge $deadline ]; then
			die "$(node "$n") did not come up within ${wait_s}s; see /var/log/rabbitmq/$(node "$n").log"
		fi
		sleep 1
	done
}

# members N prints the cluster's disc members as node N sees them.
members() {
	ctl "$1" -q cluster_status --formatter json 2>/dev/null |
		grep -o '"disk_nodes":\[[^]]*\]' | grep -o 'eaimq[0-9]@localhost' || true
}

join() {
	local n=$1 first
	first=$(node 1)
	if members 1 | grep -qx "$(node "$n")"; then
		return # already a member: left alone
	fi
	say "$(node "$n") joins $first"
	ctl "$n" -q stop_app >/dev/null
	if ! out=$(ctl "$n" -q join_cluster "$first" 2>&1); then
		ctl "$n" -q start_app >/dev/null || true
		die "$(node "$n") could not join $first: $out
  (a node left over from another cluster: 'scripts/cluster.sh down --purge' starts afresh, deleting the cluster's data)"
	fi
	ctl "$n" -q start_app >/dev/null
}

up() {
	ensure_installed
	# Start every stopped node before waiting for any: a node that was
	# clustered waits at boot for the peers it last saw, so they must be
	# starting too.
	for n in "${nodes[@]}"; do start_node "$n"; done
	for n in "${nodes[@]}"; do await_node "$n"; done
	for n in 2 3; do join "$n"; done
	for n in "${nodes[@]}"; do
		# Runtime too: a node started by an older cluster.sh keeps this
		# until it restarts.
		ctl "$n" -q set_vm_memory_high_watermark absolute 512MiB >/dev/null
	done
	say "up: $(members 1 | tr '\n' ' ')(AMQP 127.0.0.1:5681-5683)"
}

status() {
	for n in "${nodes[@]}"; do
		local state=down
		if app_running "$n"; then
			state=running
		elif running "$n"; then
			state="VM up, app stopped"
		fi
		printf '%s\t127.0.0.1:%s\t%s\n' "$(node "$n")" "$(port "$n")" "$state"
	done
	for n in "${nodes[@]}"; do
		if running "$n"; then
			echo "cluster_status (from $(node "$n")):"
			ctl "$n" -q cluster_status --formatter json
			echo
			return
		fi
	done
	echo "cluster_status: no node answers"
}

# beam_pid N is the OS pid of node N's Erlang VM: the node's own word when
# it answers, else its pid file.
beam_pid() {
	local pid
	pid=$(ctl "$1" -q eval 'os:getpid().' 2>/dev/null | tr -dc '0-9') || true
	if [ -z "$pid" ] && [ -r "$base/$1/$(node "$1").pid" ]; then
		pid=$(tr -dc '0-9' <"$base/$1/$(node "$1").pid")
	fi
	echo "$pid"
}

kill_node() {
	local n=$1 pid
	pid=$(beam_pid "$n")
	[ -n "$pid" ] || die "$(node "$n") is not running (no pid)"
	# Never anything but that node's VM: a beam.smp started with the
	# node's name in its environment (3.10 passes no -sname on the command
	# line; the node names itself at boot from RABBITMQ_NODENAME).
	if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != beam.smp ] ||
		! tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RABBITMQ_NODENAME=$(node "$n")"; then
		die "pid $pid is not $(node "$n")'s Erlang VM"
	fi
	say "SIGKILL $(node "$n") (beam.smp pid $pid)"
	kill -KILL "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}

down() {
	for n in "${nodes[@]}"; do
		if running "$n"; then
			say "stopping $(node "$n")"
			ctl "$n" -q stop >/dev/null
		fi
	done
	if [ "${1:-}" = "--purge" ]; then
		say "deleting $base"
		rm -rf "$base"
	fi
}

case ${1:-} in
up) up ;;
status) status ;;
kill)
	check_n "${2:-}"
	kill_node "$2"
	;;
start)
	check_n "${2:-}"
	ensure_installed
	start_node "$2"
	await_node "$2"
	# A node that crashed rejoins on its own from its data; one never
	# clustered (its data purged) joins now.
	[ "$2" = 1 ] || join "$2"
	say "$(node "$2") is up on 127.0.0.1:$(port "$2")"
	;;
down)
	case ${2:-} in
	"" | --purge) down "${2:-}" ;;
	*) die "down takes only --purge" ;;
	esac
	;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed -n '/^#/s/^# \{0,1\}//p' >&2
	exit 2
	;;
esac
