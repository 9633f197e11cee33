#!/usr/bin/env bash
# demo-cluster.sh: the whole flow on the local three-node cluster, with a
# node killed mid-run, and the report that nothing was lost. Safe to run
# again.
#
#   scripts/demo-cluster.sh
#
# 1. starts the local cluster (scripts/cluster.sh up: eaimq1..3@localhost on
#    5681-5683, never rabbit@localhost) and PostgreSQL (scripts/pg-up.sh),
#    installing either when missing; builds the programs into ./bin;
# 2. makes its own vhost (eaimq-demo-cluster) and database
#    (eaimq_demo_cluster), both emptied first, and declares quorum queues
#    (topology -queue-type quorum);
# 3. publishes 300 claims (270 with documents, 30 without: the partner's
#    422) to the cluster, EAI_AMQP_URL listing the three nodes;
# 4. runs three consumers, one per node (as if on three hosts), sharing the
#    PostgreSQL store, against the stand-in partner at 20 ms a call;
# 5. once a third of the claims are delivered, SIGKILLs the node holding
#    claim.in's Raft leader (scripts/cluster.sh kill N), lets the other two
#    finish, then starts the node again;
# 6. reports, per outcome, what the partner and the queues saw, and exits 0
#    only if nothing was lost and no claim was accepted twice.
#
# Environment: EAIMQ_DEMO_PORT (the stand-in partner, default 19203).
# The cluster and PostgreSQL stay up; `scripts/cluster.sh down` stops the
# cluster.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
bin=$top/bin
port=${EAIMQ_DEMO_PORT:-19203}
vhost=eaimq-demo-cluster
dbname=eaimq_demo_cluster
good=270 bad=30
work=$(mktemp -d)
pids=()
partner_pid=
cleanup() {
	for p in "${pids[@]}" $partner_pid; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
. "$top/scripts/lib/partner.sh" # start_partner
step() { printf '\n== %s\n' "$*"; }
ctl() { rabbitmqctl -n "eaimq$1@localhost" -q "${@:2}"; }
# up_node prints a node that answers (the killed one does not).
up_node() {
	local n
	for n in 1 2 3; do
		if ctl "$n" eval 'node().' >/dev/null 2>&1; then
			echo "$n"
			return
		fi
	done
	echo "demo-cluster: no node of the cluster answers" >&2
	exit 1
}
# control POSTs a JSON body to the partner's /_control (bash alone: a fresh
# machine may have no curl).
control() {
	local reply
	exec 3<>"/dev/tcp/127.0.0.1/$port"
	printf 'POST /_control HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' "${#1}" "$1" >&3
	reply=$(cat <&3)
	exec 3<&-
	case $reply in "HTTP/1."?" 200"*) ;; *) echo "demo-cluster: /_control $1: ${reply%%$'\r'*}" >&2; exit 1 ;; esac
}
held() { "$bin/claimsys" -stats -json -addr "127.0.0.1:$port" | grep -o '"held":[0-9]*' | grep -o '[0-9]*$'; }
accepted() { "$bin/claimsys" -stats -addr "127.0.0.1:$port" | awk '!/^#/ && $3 > 0 {n++} END {print n + 0}'; }

step "cluster and PostgreSQL"
scripts/cluster.sh up
scripts/pg-up.sh

step "build"
scripts/build.sh

step "vhost $vhost and database $dbname (emptied first)"
ctl 1 delete_vhost "$vhost" >/dev/null 2>&1 || true
ctl 1 add_vhost "$vhost"
ctl 1 set_permissions -p "$vhost" guest '.*' '.*' '.*'
urls=()
for n in 1 2 3; do urls+=("amqp://guest:guest@127.0.0.1:$((5680 + n))/$vhost"); done
# rotated N: node N's address first, then the others (a host's nearest node).
rotated() {
	local n=$1 out=() i
	for i in 0 1 2; do out+=("${urls[$(((n - 1 + i) % 3))]}"); done
	(IFS=,; echo "${out[*]}")
}
export EAI_AMQP_URL
EAI_AMQP_URL=$(rotated 1)
psql -q -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS $dbname WITH (FORCE)" -c "CREATE DATABASE $dbname"
export EAI_MQ_DB=postgres://postgres@127.0.0.1:5432/$dbname
echo "EAI_AMQP_URL lists 127.0.0.1:5681,5682,5683 (vhost $vhost); EAI_MQ_DB=$EAI_MQ_DB"

step "topology -queue-type quorum"
bin/topology -queue-type quorum
ctl 1 list_queues -p "$vhost" name type leader members | sed 's/^/  /'

step "publish $good claims with documents and $bad without"
mkdir -p "$work/claims"
for i in $(seq -w 1 $good); do
	printf '{"guid":"dc-ok-%s","claimId":"C-%s","docs":["receipt.pdf"],"amount":100}\n' "$i" "$i" >"$work/claims/ok-$i.json"
done
for i in $(seq -w 1 $bad); do
	printf '{"guid":"dc-422-%s","claimId":"C-x%s","docs":[],"amount":100}\n' "$i" "$i" >"$work/claims/bad-$i.json"
done
bin/publish "$work"/claims/*.json

step "stand-in partner on 127.0.0.1:$port, 20 ms a call"
start_partner "$port" "$work/claimsys.log" -delay 20ms

step "three consumers, one per node, one PostgreSQL store"
for n in 1 2 3; do
	EAI_AMQP_URL=$(rotated "$n") bin/consumer --claim "http://127.0.0.1:$port" --max-seconds 600 --prefetch 5 \
		>"$work/consumer-$n.out" 2>"$work/consumer-$n.log" &
	pids+=($!)
done
until [ "$(accepted)" -ge $((good / 3)) ]; do sleep 0.05; done
# Calls are held at the partner (its gate) so that the node dies with
# claims really in flight, not after the run is over: 20 ms a call, three
# consumers with 5 each drain 300 claims in well under a second.
control "{\"hold_after\": $(accepted)}"
until [ "$(held)" -ge 3 ]; do sleep 0.05; done
leader=$(ctl "$(up_node)" list_queues -p "$vhost" --formatter json name leader |
	grep -o '"name":"claim.in","leader":"eaimq[0-9]' | grep -o '[0-9]$')
echo "$(accepted) claims delivered, $(held) calls in flight (held at the partner); claim.in's leader is on eaimq$leader@localhost"

step "SIGKILL eaimq$leader@localhost mid-run"
scripts/cluster.sh kill "$leader"
control '{"release": true}'
echo "$(accepted) delivered at the kill; the held calls are answered, the other two nodes elect a new leader, the consumers on eaimq$leader fail over"
deadline=$((SECONDS + 300))
until [ "$(accepted)" -ge $good ]; do
	[ $SECONDS -lt $deadline ] || { echo "demo-cluster: not every claim delivered within 300s" >&2; exit 1; }
	sleep 0.5
done
echo "every claim with documents delivered while eaimq$leader@localhost was down"
ctl "$(up_node)" list_queues -p "$vhost" name leader members | sed 's/^/  /'

step "start eaimq$leader@localhost again"
scripts/cluster.sh start "$leader"

step "stop the consumers (SIGINT: drain, then exit)"
for p in "${pids[@]}"; do kill -INT "$p"; done
for p in "${pids[@]}"; do wait "$p" || { echo "demo-cluster: a consumer exited $?" >&2; exit 1; }; done
pids=()
for n in 1 2 3; do echo "consumer $n: $(tail -n 1 "$work/consumer-$n.out")"; done

step "report"
bin/claimsys -stats -addr "127.0.0.1:$port" >"$work/stats.txt"
delivered=$(awk '!/^#/ && $1 ~ /^dc-ok-/ && $3 > 0 {n++} END {print n + 0}' "$work/stats.txt")
twice=$(awk '!/^#/ && $3 > 1 {n++} END {print n + 0}' "$work/stats.txt")
# claim.dead read message by message (dlq list), not list_queues, which
# shows a quorum queue's counts as of its last stats tick.
dead=$(bin/dlq -json list | grep -c '"message_id":"dc-422-' || true)
lost=$((good + bad - delivered - dead))
printf '  %-34s %5s\n' "published (confirmed)" $((good + bad)) \
	"delivered (201), once each" "$delivered" \
	"accepted twice by the partner" "$twice" \
	"in claim.dead (the 422s)" "$dead" \
	"lost (neither delivered nor dead)" "$lost"
if [ "$lost" -eq 0 ] && [ "$twice" -eq 0 ] && [ "$delivered" -eq $good ] && [ "$dead" -eq $bad ]; then
	echo "demo-cluster: a node died mid-run; none lost, none processed twice"
else
	echo "demo-cluster: the counts above do not add up" >&2
	exit 1
fi
