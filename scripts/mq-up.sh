#!/usr/bin/env bash
# mq-up.sh: make sure a RabbitMQ broker answers on the AMQP port, with the
# lab's absolute 512MiB memory watermark, and leave the status file.
# Safe to run any number of times.
#
#   scripts/mq-up.sh
#
# If nothing answers on 127.0.0.1:${EAIMQ_AMQP_PORT:-5672}, it installs
# rabbitmq-server from Debian when missing and starts a node named
# rabbit@localhost with scripts/rabbitmq.conf. If a broker already answers
# (a system node, perhaps under another name), it starts no second one: it
# finds that node's name, sets the watermark at runtime, and says which it is.
# EAIMQ_NODE and EAIMQ_AMQP_PORT choose another node name and port (the
# distribution port is the AMQP port + 20000), for a second, private node.
# Finally it runs brokerstatus, which writes ${EAIMQ_STATUS_FILE:-/root/eaimw/mq/status.txt}.
#
# Run by hand it is the lab's step, and does what the lab asks of whichever
# node answers. The project's other scripts (demo, tests, benchmarks) run it
# with EAIMQ_WATERMARK=own: the watermark is then set only on a node this
# run started itself, and a broker somebody else runs is left as it is (its
# status is not checked against the lab's 512MiB either).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(dirname "$here")
port=${EAIMQ_AMQP_PORT:-5672}
node=${EAIMQ_NODE:-rabbit@localhost}
wait_s=${EAIMQ_BROKER_WAIT:-120}

say() { echo "mq-up: $*"; }
die() { echo "mq-up: $*" >&2; exit 1; }

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }

. "$here/lib/apt.sh" # apt_install, and the trap that cleans up after it

install_broker() {
	say "rabbitmq-server is not installed; installing it from Debian"
	apt_install rabbitmq-server
	command -v rabbitmq-server >/dev/null || die "rabbitmq-server still missing after apt-get install"
}

detect_node() {
	if rabbitmqctl -n "$node" -q eval 'node().' >/dev/null 2>&1; then
		echo "$node"
	else
		rabbitmqctl -q eval 'node().' 2>/dev/null | tr -d "'" | tail -n 1
	fi
}

if ! command -v rabbitmq-server >/dev/null || ! command -v rabbitmqctl >/dev/null; then
	install_broker
fi

watermark=${EAIMQ_WATERMARK:-lab}
case $watermark in lab | own) ;; *) die "EAIMQ_WATERMARK is lab (the default) or own, not $watermark" ;; esac
started=
if answers; then
	node=$(detect_node)
	[ -n "$node" ] || die "something answers on 127.0.0.1:$port but rabbitmqctl reaches no node (is it RabbitMQ, and is this root?)"
	say "a broker already answers on 127.0.0.1:$port: node $node; not starting another"
else
	# The config must be readable by the rabbitmq user the server drops to.
	confdir=/var/lib/rabbitmq/eaimq-conf
	mkdir -p "$confdir"
	sed "s/127.0.0.1:5672/127.0.0.1:$port/" "$here/rabbitmq.conf" >"$confdir/${node%@*}.conf"
	chown -R rabbitmq:rabbitmq "$confdir" 2>/dev/null || true
	say "starting node $node (config $here/rabbitmq.conf)"
	# epmd (started by the first node) is left on every address, as
	# RabbitMQ leaves it: rabbitmqctl names its own node after the host
	# (rabbitmqcli-N-rabbit@$(hostname)), and a cluster node that answers it,
	# as list_queues on a quorum queue makes every member do, looks it up
	# through the epmd at the address the host name resolves to (127.0.1.1 on
	# Debian). With epmd on 127.0.0.1 and ::1 alone, that lookup failed and
	# list_queues on the local cluster waited out its 60 s timeout.
	RABBITMQ_NODENAME=$node \
		RABBITMQ_CONFIG_FILE="$confdir/${node%@*}" \
		RABBITMQ_NODE_PORT=$port \
		RABBITMQ_DIST_PORT=$((port + 20000)) \
		rabbitmq-server -detached
	deadline=$((SECONDS + wait_s))
	until answers && rabbitmqctl -n "$node" -q await_startup >/dev/null 2>&1; do
		if [ $SECONDS -ge $deadline ]; then
			die "node $node did not come up within ${wait_s}s; see /var/log/rabbitmq/$node.log"
		fi
		sleep 1
	done
	say "node $node is up on 127.0.0.1:$port"
	started=1
fi

if [ "$watermark" = own ] && [ -z "$started" ]; then
	say "node $node was not started by this run: its watermark and status are left alone (scripts/mq-up.sh alone sets the lab's 512MiB)"
	exit 0
fi

# Runtime setting: a node we did not start may have a relative watermark
# in its config; this makes it the lab's absolute 512MiB until it restarts.
rabbitmqctl -n "$node" -q set_vm_memory_high_watermark absolute 512MiB >/dev/null
say "memory watermark set to absolute 512MiB on $node"

mkdir -p "$top/bin"
(cd "$top" && go build -o bin/brokerstatus ./brokerstatus)
"$top/bin/brokerstatus" -node "$node" -o "${EAIMQ_STATUS_FILE:-/root/eaimw/mq/status.txt}"
