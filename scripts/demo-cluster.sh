#!/usr/bin/env bash
# demo-cluster.sh: the scale-out job end to end on this machine: quorum
# queues on a local three-node RabbitMQ cluster, three consumers sharing one
# dedup store in PostgreSQL, and the node leading claim.in killed mid-run.
# It ends with the accounting of every claim and exits 0 only if none was
# lost and none was delivered twice. Safe to run again.
#
#   scripts/demo-cluster.sh
#
# 1. starts (installing when missing) the cluster (scripts/cluster.sh up,
#    ports 5681-5683) and PostgreSQL (scripts/pg-up.sh);
# 2. builds the programs; declares the topology with -queue-type quorum in
#    a vhost of its own, eaimq-demo-cluster, emptied first; makes a database
#    of its own, eaimq_demo_cluster, emptied first;
# 3. publishes 600 claims (60 of them without documents: the partner's 422)
#    through EAI_AMQP_URL listing all three nodes;
# 4. runs three consumers against a stand-in partner answering in 50 ms,
#    SIGKILLs the node that leads claim.in once a fifth is delivered, and
#    starts it again when the consumers have failed over and finished;
# 5. prints where every claim ended.
#
# Environment: EAIMQ_DEMO_PORT (stand-in partner, default 19203). The
# machine's own broker (rabbit@localhost, 5672) is not touched.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
bin=$top/bin
port=${EAIMQ_DEMO_PORT:-19203}
vhost=eaimq-demo-cluster
db=eaimq_demo_cluster
claims=600 rejected=60
work=$(mktemp -d)
pids=()
killed=
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -n "$killed" ] && scripts/cluster.sh start "$killed" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
step() { printf '\n== %s\n' "$*"; }

step "cluster and PostgreSQL"
scripts/cluster.sh up
scripts/pg-up.sh

step "build"
scripts/build.sh

step "vhost $vhost (quorum topology) and database $db"
ctl1() { rabbitmqctl -n eaimq1@localhost "$@"; }
ctl1 -q delete_vhost "$vhost" >/dev/null 2>&1 || true
ctl1 -q add_vhost "$vhost"
ctl1 -q set_permissions -p "$vhost" guest '.*' '.*' '.*'
export EAI_AMQP_URL="amqp://guest:guest@127.0.0.1:5681/$vhost,amqp://guest:guest@127.0.0.1:5682/$vhost,amqp://guest:guest@127.0.0.1:5683/$vhost"
psql -q -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
export EAI_MQ_DB="postgres://postgres@127.0.0.1:5432/$db"
bin/topology -queue-type quorum
# The node number of claim.in's leader, asked of a node that is up.
leader() {
	local n
	for n in 1 2 3; do
		rabbitmqctl -n "eaimq$n@localhost" -q list_queues -p "$vhost" --no-table-headers name leader 2>/dev/null |
			awk '$1 == "claim.in" { sub(/^eaimq/, "", $2); sub(/@.*/, "", $2); print $2; found = 1 } END { exit !found }' && return
	done
}

step "stand-in partner on 127.0.0.1:$port (50 ms a claim)"
bin/claimsys -addr "127.0.0.1:$port" -delay 50ms >"$work/claimsys.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do bin/claimsys -stats -addr "127.0.0.1:$port" >/dev/null 2>&1 && break; sleep 0.1; done

step "publish $claims claims"
run=$(date +%s)-$$
for i in $(seq -w 1 $claims); do
	if [ "$i" -le $rejected ]; then docs='[]'; else docs='["receipt.pdf"]'; fi
	printf '{"guid":"cl-%s-%s","claimId":"C-%s","docs":%s,"amount":100}\n' "$i" "$run" "$i" "$docs" >"$work/c$i.json"
done
bin/publish "$work"/c*.json

# control posts to the stand-in's /_control (bash's /dev/tcp: a fresh
# machine may have no curl).
control() {
	exec 3<>"/dev/tcp/127.0.0.1/$port"
	printf 'POST /_control HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "${#1}" "$1" >&3
	head -n 1 <&3 | grep -q ' 200 ' || { echo "demo-cluster: /_control refused $1" >&2; exit 1; }
	exec 3<&-
}
control "{\"hold_after\":$(((claims - rejected) / 5))}"

step "three consumers; the leader of claim.in is killed mid-run"
for k in 1 2 3; do
	bin/consumer --claim "http://127.0.0.1:$port" --max-seconds 600 --prefetch 5 >"$work/consumer$k.out" 2>"$work/consumer$k.log" &
	pids+=($!)
done
delivered() { bin/claimsys -stats -addr "127.0.0.1:$port" | awk '$3 >= 1 {n++} END {print n+0}'; }
held() { bin/claimsys -stats -json -addr "127.0.0.1:$port" | sed -n 's/.*"held":\([0-9]*\).*/\1/p'; }
# The gate: the partner holds every call once a fifth of the claims are in,
# so that claims are in flight, unacked, when the node dies.
until [ "${n:-0}" -gt 0 ]; do n=$(held); sleep 0.1; done
killed=$(leader)
echo "demo-cluster: $(delivered) delivered, $(held) calls held at the partner; killing eaimq$killed@localhost, claim.in's leader"
scripts/cluster.sh kill "$killed"
control '{"release":true}' 
deadline=$((SECONDS + 120))
until [ "$(delivered)" -ge $((claims - rejected)) ]; do
	[ $SECONDS -lt $deadline ] || { echo "demo-cluster: not every claim delivered within 120s" >&2; tail -5 "$work"/consumer*.log >&2; exit 1; }
	sleep 0.5
done
echo "demo-cluster: all delivered; claim.in's leader is now eaimq$(leader)@localhost; starting eaimq$killed@localhost again"
scripts/cluster.sh start "$killed"
killed=
for p in "${pids[@]:1}"; do kill -INT "$p" 2>/dev/null || true; done # one may have ended already
for p in "${pids[@]:1}"; do wait "$p" || true; done
grep -h "reconnected" "$work"/consumer*.log | sed 's/^/  /' | cut -c1-160 || true
cat "$work"/consumer*.out

step "where every claim ended"
bin/claimsys -stats -addr "127.0.0.1:$port" >"$work/stats.txt"
bin/dlq -json list >"$work/dlq.json"
lost=0 twice=0 ok=0 dead=0
for i in $(seq -w 1 $claims); do
	g="cl-$i-$run"
	accepted=$(awk -v g="$g" '$1 == g {print $3}' "$work/stats.txt")
	if [ "${accepted:-0}" -ge 1 ]; then
		ok=$((ok + 1))
		[ "$accepted" -gt 1 ] && twice=$((twice + 1))
	elif grep -qF "\"message_id\":\"$g\"" "$work/dlq.json"; then
		dead=$((dead + 1))
	else
		lost=$((lost + 1))
		echo "LOST $g"
	fi
done
echo "published $claims: delivered $ok ($twice more than once), dead-lettered $dead, lost $lost"
if [ "$lost" -eq 0 ] && [ "$twice" -eq 0 ] && [ "$dead" -eq $rejected ]; then
	echo "demo-cluster: a node killed mid-run, and every claim ended where it should: none lost, none processed twice"
else
	echo "demo-cluster: some claims did not end where expected" >&2
	exit 1
fi
