#!/usr/bin/env bash
# partitions.sh: network partitions, Jepsen-style, on a three-node RabbitMQ
# cluster in network namespaces of this machine (issue 32).
#
#   scripts/partitions.sh [-short] [-version 3.10|4.0.5] [-khepri] [-runs N] [-instance I]
#                         [-seconds S] [NEMESIS...]
#
# NEMESIS is any of isolate-one, isolate-in-leader, isolate-dead-leader,
# flap, partition-kill (default: all five). Each run is -seconds long
# (default 150) and each nemesis runs -runs times (default 3). -short is
# one run of isolate-in-leader, 60 s of faults, 3.10 unless -version says
# otherwise: scripts/test.sh runs it. -instance I (0 to 9, default 0) runs
# beside another instance: bridge eaimqpbrI, 10.213.I.0/24, namespaces
# eaimqpI-1..3 (instance 0: eaimqpbr, 10.213.0.0/24, eaimqp1..3).
#
# The script creates a bridge (eaimqpbr, 10.213.0.1/24 in this namespace,
# no uplink; the namespaces have no default route, so nothing they send
# leaves the machine), three namespaces eaimqp1..3 each with a veth on the bridge
# (10.213.0.11..13) and a RabbitMQ node rabbit@10.213.0.1N in each: 3.10
# from this machine's package or 4.0.5 from the chroot of
# /work/shared/rabbitmq4.sh (RMQ4_ROOT, /var/tmp/trixie), with net_ticktime
# 10, pause_minority (the metadata store Mnesia) and, with -khepri, the
# khepri_db feature flag. The clients (internal/partition's TestPartitions:
# publishers, three consumers on PostgreSQL, the partner stand-in) stay in
# this namespace and reach the nodes over the bridge. A link is cut with
# a blackhole route to the peer in both namespaces.
#
# Namespaces, veths, bridge and node processes are removed on exit, also
# after a failure or a signal (a trap). It prints the table (one row per
# nemesis) and exits 0 only if every row has lost 0 and unexpected 0.
# Node data and logs: /var/tmp/eaimq-part/I (3.10) or the chroot's
# /var/lib/rabbitmq/eaimq-part/I (4.0.5); EAIMQ_PART_KEEP=1 keeps them.
# The consumers' logs of each run, and the runs' rows (runs.tsv), stay in
# EAIMQ_PART_LOGS (default a new /tmp/eaimq-part-logs.XXXXXX).
#
# Internal: "partitions.sh _op VERB ..." is what the test calls for the
# nemeses (cut, heal, ctl, kill, start, ...); it needs the state the
# running script exported.
set -euo pipefail
export PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self="$here/$(basename "${BASH_SOURCE[0]}")"
top=$(cd "$here/.." && pwd)

# -instance I (0 to 9; default 0) runs a second cluster beside the first
# on its own bridge, subnet, namespaces and data directories.
PART_INSTANCE=${PART_INSTANCE:-0}
for a in "$@"; do
	case ${prev:-} in -instance) PART_INSTANCE=$a ;; esac
	prev=$a
done
case $PART_INSTANCE in [0-9]) ;; *) echo "partitions: -instance is 0 to 9, not '$PART_INSTANCE'" >&2; exit 2 ;; esac
if [ "$PART_INSTANCE" = 0 ]; then BR=eaimqpbr NS_PREFIX=eaimqp; else BR=eaimqpbr$PART_INSTANCE NS_PREFIX=eaimqp$PART_INSTANCE-; fi
NET=10.213.$PART_INSTANCE
R4=$(realpath -m "${RMQ4_ROOT:-/var/tmp/trixie}")

say() { echo "partitions: $*" >&2; }
die() {
	echo "partitions: $*" >&2
	exit 1
}

ns() { echo "$NS_PREFIX$1"; }
have_ns() { ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx "$(ns "$1")"; }
ip_of() { echo "$NET.1$1"; }
node_of() { echo "rabbit@$(ip_of "$1")"; }

# --- the node's commands: the same env file for server and CLI ----------

# datadir N, as seen by the node (inside the chroot for 4.0.5), and on
# this machine.
datadir() {
	if [ "$PART_VERSION" = 4.0.5 ]; then echo "/var/lib/rabbitmq/eaimq-part/$PART_INSTANCE/$1"; else echo "/var/tmp/eaimq-part/$PART_INSTANCE/$1"; fi
}
hostdir() {
	if [ "$PART_VERSION" = 4.0.5 ]; then echo "$R4$(datadir "$1")"; else datadir "$1"; fi
}

# as_node N PROGRAM ARGS runs one of RabbitMQ's scripts (rabbitmq-server,
# rabbitmqctl, ...) in node N's namespace, as the rabbitmq user, with a
# clean environment and node N's own env file: the host's
# /etc/rabbitmq/rabbitmq-env.conf pins epmd and distribution to 127.0.0.1,
# where a namespaced node's peers cannot reach it.
as_node() {
	local n=$1 prog=$2
	shift 2
	local envs=(PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 LC_ALL=C.UTF-8 HOME=/var/lib/rabbitmq
		RABBITMQ_CONF_ENV_FILE="$(datadir "$n")/rabbitmq-env.conf")
	if [ "$PART_VERSION" = 4.0.5 ]; then
		local id
		id=$(awk -F: '$1 == "rabbitmq" { print $3 ":" $4 }' "$R4/etc/passwd")
		ip netns exec "$(ns "$n")" chroot --userspec="$id" --groups="${id#*:}" "$R4" \
			/usr/bin/env -i -C /var/lib/rabbitmq "${envs[@]}" "/usr/lib/rabbitmq/bin/$prog" "$@"
	else
		ip netns exec "$(ns "$n")" setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups \
			/usr/bin/env -i -C /var/lib/rabbitmq "${envs[@]}" "/usr/lib/rabbitmq/bin/$prog" "$@"
	fi
}
ctl() {
	local n=$1
	shift
	as_node "$n" rabbitmqctl -l -n "$(node_of "$n")" "$@"
}

write_config() {
	local n=$1 d h
	d=$(datadir "$n") h=$(hostdir "$n")
	mkdir -p "$h/log"
	cat >"$h/rabbitmq.conf" <<EOF
listeners.tcp.1 = $(ip_of "$n"):5672
# The clients reach the node over the private bridge, not loopback.
loopback_users = none
vm_memory_high_watermark.absolute = 512MiB
# A partition noticed within a run's time (default 60 s).
net_ticktime = 10
cluster_partition_handling = pause_minority
EOF
	echo '[].' >"$h/enabled_plugins"
	cat >"$h/rabbitmq-env.conf" <<EOF
NODENAME=$(node_of "$n")
USE_LONGNAME=true
CONFIG_FILE=$d/rabbitmq.conf
MNESIA_BASE=$d/mnesia
LOG_BASE=$d/log
ENABLED_PLUGINS_FILE=$d/enabled_plugins
DIST_PORT=25672
EOF
	if [ "$PART_VERSION" = 4.0.5 ]; then
		chown -R "$(awk -F: '$1 == "rabbitmq" { print $3 ":" $4 }' "$R4/etc/passwd")" "$h"
	else
		chown -R rabbitmq:rabbitmq "$h"
	fi
}

beam_pid() {
	local p
	p=$(cat "$(hostdir "$1")/mnesia/$(node_of "$1").pid" 2>/dev/null) || return 1
	[ -n "$p" ] && [ "$(ip netns identify "$p" 2>/dev/null)" = "$(ns "$1")" ] && echo "$p"
}

start_node() {
	local n=$1
	rm -f "$(hostdir "$n")/mnesia/$(node_of "$n").pid"
	as_node "$n" rabbitmq-server -detached >"$(hostdir "$n")/log/startup.out" 2>&1 || :
}

await_node() {
	local n=$1 deadline=$((SECONDS + 150))
	until ctl "$n" -q await_startup --timeout 30 >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$deadline" ] || die "$(node_of "$n") did not boot within 150 s; see $(hostdir "$n")/log"
		sleep 1
	done
}

# --- the network -------------------------------------------------------

net_up() {
	ip link add "$BR" type bridge
	ip addr add "$NET.1/24" dev "$BR"
	ip link set "$BR" up
	for n in 1 2 3; do
		ip netns add "$(ns "$n")"
		ip link add "${NS_PREFIX}${n}h" type veth peer name eth0 netns "$(ns "$n")"
		ip link set "${NS_PREFIX}${n}h" master "$BR" up
		ip -n "$(ns "$n")" addr add "$(ip_of "$n")/24" dev eth0
		ip -n "$(ns "$n")" link set eth0 up
		ip -n "$(ns "$n")" link set lo up
	done
}

# cut A B: no packet between nodes A and B, in either direction; each
# still reaches the clients at $NET.1.
cut() {
	ip -n "$(ns "$1")" route replace blackhole "$(ip_of "$2")/32"
	ip -n "$(ns "$2")" route replace blackhole "$(ip_of "$1")/32"
}
heal() {
	for n in 1 2 3; do
		for m in 1 2 3; do
			[ "$n" = "$m" ] || ip -n "$(ns "$n")" route del blackhole "$(ip_of "$m")/32" 2>/dev/null || :
		done
	done
}

# cleanup removes everything this script made, whatever state it is in.
# Node processes first (their pid files; then anything left in the
# namespaces, such as epmd), then the namespaces, veths and bridge.
cleanup() {
	local rc=$? n p
	trap - EXIT INT TERM
	# The test first: its consumers and publishers die with it (their
	# parent-death signal), before the nodes they talk to.
	if [ -n "${gotest:-}" ]; then
		for p in $(pgrep -P "$gotest" 2>/dev/null) "$gotest"; do kill -TERM "$p" 2>/dev/null || :; done
		wait "$gotest" 2>/dev/null || :
	fi
	for n in 1 2 3; do
		have_ns "$n" || continue
		for p in $(ip netns pids "$(ns "$n")" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || :; done
	done
	for n in 1 2 3; do
		ip netns del "$(ns "$n")" 2>/dev/null || :
		ip link del "${NS_PREFIX}${n}h" 2>/dev/null || :
	done
	ip link del "$BR" 2>/dev/null || :
	rm -f "${report:-}" "${rows:-}"
	if [ -z "${EAIMQ_PART_KEEP:-}" ] && [ -n "${PART_VERSION:-}" ]; then
		for n in 1 2 3; do rm -rf "$(hostdir "$n")"; done
	fi
	exit "$rc"
}

# --- the cluster ---------------------------------------------------------

cluster_up() {
	local n
	for n in 1 2 3; do
		rm -rf "$(hostdir "$n")"
		write_config "$n"
	done
	for n in 1 2 3; do start_node "$n"; done
	for n in 1 2 3; do await_node "$n"; done
	for n in 2 3; do
		ctl "$n" -q stop_app >/dev/null
		ctl "$n" -q join_cluster "$(node_of 1)" >/dev/null
		ctl "$n" -q start_app >/dev/null
	done
	if [ "$PART_VERSION" = 4.0.5 ]; then
		ctl 1 -q enable_feature_flag all >/dev/null
		if [ -n "$KHEPRI" ]; then ctl 1 -q enable_feature_flag --opt-in khepri_db >/dev/null; fi
	fi
	say "clustered: $(ctl 1 -q eval 'rabbit_nodes:all_running().' | tr -d '\n')"
}

# op is the nemeses' and the test's interface to the cluster.
op() {
	local verb=${1:-}
	shift || :
	case $verb in
	cut) cut "$1" "$2" ;;
	isolate)
		for m in 1 2 3; do [ "$m" = "$1" ] || cut "$1" "$m"; done
		;;
	heal) heal ;;
	ctl)
		local n=$1
		shift
		ctl "$n" "$@"
		;;
	kill)
		local p
		p=$(beam_pid "$1") || die "node $1: no pid"
		kill -KILL "$p"
		while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
		;;
	start)
		start_node "$1"
		await_node "$1"
		;;
	*) die "_op: unknown verb '$verb'" ;;
	esac
}

if [ "${1:-}" = _op ]; then
	shift
	: "${PART_VERSION:?_op runs under partitions.sh only}"
	op "$@"
	exit
fi

# --- main ----------------------------------------------------------------

short= PART_VERSION=3.10 KHEPRI= runs=3 seconds=150 nemeses=()
while [ $# -gt 0 ]; do
	case $1 in
	-short) short=1 ;;
	-version)
		PART_VERSION=${2:-}
		shift
		;;
	-khepri) KHEPRI=1 ;;
	-instance) shift ;; # read above
	-runs)
		runs=${2:-}
		shift
		;;
	-seconds)
		seconds=${2:-}
		shift
		;;
	-h | -help | --help)
		sed -n '2,/^set -euo/p' "$0" | sed -n '/^#/s/^# \{0,1\}//p'
		exit 0
		;;
	-*) die "unknown flag $1 (see -h)" ;;
	*) nemeses+=("$1") ;;
	esac
	shift
done
case $PART_VERSION in 3.10 | 4.0.5) ;; *) die "-version is 3.10 or 4.0.5, not '$PART_VERSION'" ;; esac
[ -z "$KHEPRI" ] || [ "$PART_VERSION" = 4.0.5 ] || die "-khepri needs -version 4.0.5"
if [ -n "$short" ]; then
	runs=1 seconds=60
	[ ${#nemeses[@]} -gt 0 ] || nemeses=(isolate-in-leader)
fi
[ ${#nemeses[@]} -gt 0 ] || nemeses=(isolate-one isolate-in-leader isolate-dead-leader flap partition-kill)
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, the nodes run as the rabbitmq user)"
# What a fresh Debian machine lacks: ip (iproute2), the 3.10 nodes'
# package, and the PostgreSQL the consumers' store is on (pg-up.sh starts
# or installs it; it leaves a running one alone).
. "$here/lib/apt.sh"
command -v ip >/dev/null || apt_install iproute2
if [ "$PART_VERSION" = 3.10 ] && ! command -v rabbitmq-server >/dev/null; then
	say "rabbitmq-server is not installed; installing it from Debian"
	apt_install rabbitmq-server
fi
"$here/pg-up.sh" >&2
if [ "$PART_VERSION" = 4.0.5 ]; then
	[ -x "$R4/usr/lib/rabbitmq/bin/rabbitmq-server" ] || die "no RabbitMQ 4.0.5 in $R4: run /work/shared/rabbitmq4.sh up"
	mountpoint -q "$R4/proc" || die "$R4/proc is not mounted: run /work/shared/rabbitmq4.sh up"
fi
for n in 1 2 3; do
	! have_ns "$n" || die "namespace $(ns "$n") exists: another partitions.sh runs (or died without its trap: ip netns del $(ns "$n"))"
done
! ip link show "$BR" >/dev/null 2>&1 || die "bridge $BR exists: another partitions.sh runs"

export PART_VERSION KHEPRI PART_INSTANCE
logs=${EAIMQ_PART_LOGS:-$(mktemp -d /tmp/eaimq-part-logs.XXXXXX)}
trap cleanup EXIT
trap 'exit 130' INT TERM
net_up
store=mnesia
[ -z "$KHEPRI" ] || store=khepri
say "RabbitMQ $PART_VERSION ($store), nodes $(ip_of 1) $(ip_of 2) $(ip_of 3) on $BR; nemeses ${nemeses[*]}, $runs run(s) of ${seconds}s"
cluster_up
if [ -n "${EAIMQ_PART_HOLD:-}" ]; then # debugging: the cluster stays up until a signal
	say "up; PART_VERSION=$PART_VERSION $self _op ctl 1 cluster_status"
	sleep infinity &
	wait $!
fi

report=$(mktemp)
rows=$(mktemp)
chmod 0600 "$report" "$rows"
# In the background and waited for, so that a signal reaches the trap at
# once (bash runs it only after a foreground child ends) and the trap can
# stop the test (go test, and the test binary under it).
cd "$top"
EAIMQ_PART_OP="$self _op" EAIMQ_PART_NODES="$(ip_of 1),$(ip_of 2),$(ip_of 3)" \
	EAIMQ_PART_VERSION="$PART_VERSION" EAIMQ_PART_STORE="$store" EAIMQ_PART_NEMESES="${nemeses[*]}" \
	EAIMQ_PART_RUNS="$runs" EAIMQ_PART_SECONDS="$seconds" EAIMQ_PART_REPORT="$report" \
	EAIMQ_PART_LOGS="$logs" \
	go test -count=1 -timeout 0 -v -run '^TestPartitions$' ./internal/partition &
gotest=$!
rc=0
wait "$gotest" || rc=$?
gotest=
cp "$report" "$logs/runs.tsv"
# One row per nemesis × version × store: the runs added up.
awk -F'\t' -v OFS=' | ' '
	{ k = $1 "\t" $2 "\t" $3; if (!(k in runs)) order[++n] = k
	  runs[k]++; for (i = 4; i <= 10; i++) sum[k, i] += $i; bound[k] = $11 }
	END {
		print "| nemesis | version | store | runs | claims | unknown recovered | lost | unexpected | good called twice (bound) | good dead-lettered | BUSY >1 lineage |"
		print "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
		for (j = 1; j <= n; j++) { k = order[j]; split(k, f, "\t")
			printf "| %s | %s | %s | %d | %d | %d | %d | %d | %d (%s) | %d | %d |\n", f[1], f[2], f[3], runs[k],
				sum[k,4], sum[k,5], sum[k,6], sum[k,7], sum[k,8], bound[k], sum[k,9], sum[k,10] }
	}' "$report" | tee "$rows"
bad=$(awk -F'\t' '$6 != 0 || $7 != 0' "$report" | wc -l)
if [ ! -s "$report" ]; then
	say "no run finished (go test exit $rc)"
	exit 1
fi
[ "$bad" = 0 ] || die "$bad run(s) with lost or unexpected claims"
[ "$rc" = 0 ] || die "go test failed (exit $rc) though every finished run has lost 0 and unexpected 0"
say "every run: lost 0, unexpected 0 (the consumers' logs: $logs)"
