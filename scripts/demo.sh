#!/usr/bin/env bash
# demo.sh: the main job, end to end, on this machine. Safe to run again.
#
#   scripts/demo.sh
#
# 1. installs and starts RabbitMQ if needed (scripts/mq-up.sh); on a node it
#    started itself it sets the lab's watermark and writes the status file
#    (into its temporary directory), and a broker somebody else runs is left
#    as it is;
# 2. builds the programs into ./bin;
# 3. declares the topology (twice: it is idempotent) and starts the
#    stand-in claim system;
# 4. publishes the sample claims in scripts/claims/ (good ones, ones without
#    documents, BUSY ones, and one guid twice), runs the consumer, and
#    prints, per claim, the calls at the claim system and where it ended;
# 5. stops what it started (the broker stays; the vhost it made is deleted)
#    and exits 0 only if every claim ended where scripts/claims/expect.txt
#    says.
#
# It changes nothing of anybody else's: its vhost has a name of its own for
# each run (eaimq-demo-<time>-<pid>), its dedup store and status file live
# in a temporary directory, and it writes nothing under /root/eaimw/mq.
#
# Environment (the programs' own, plus the demo's):
#   EAI_AMQP_URL        default: a vhost of its own, made and deleted by the run
#   EAI_MQ_DB           the consumer's dedup store (default: one of the run's own)
#   EAIMQ_DEMO_PORT     port of the stand-in claim system (default 19202)
#   EAIMQ_DEMO_SECONDS  how long the consumer runs (default 4)
# Each run gives the sample guids a suffix of its own, so a second run (or a
# shared EAI_MQ_DB) does not see the first run's claims as duplicates.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
bin=$top/bin
port=${EAIMQ_DEMO_PORT:-19202}
seconds=${EAIMQ_DEMO_SECONDS:-4}
work=$(mktemp -d)
partner_pid=
own_vhost=
cleanup() {
	[ -n "$partner_pid" ] && kill "$partner_pid" 2>/dev/null && wait "$partner_pid" 2>/dev/null
	[ -n "$own_vhost" ] && rabbitmqctl -n "$node" -q delete_vhost "$vhost" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
. "$top/scripts/lib/partner.sh" # start_partner
step() { printf '\n== %s\n' "$*"; }

step "broker"
EAIMQ_WATERMARK=own EAIMQ_STATUS_FILE=$work/status.txt scripts/mq-up.sh
export EAI_MQ_DB=${EAI_MQ_DB:-$work/processed.db}

step "build"
scripts/build.sh

run=$(date +%s)-$$
node=$(rabbitmqctl -n rabbit@localhost -q eval 'node().' 2>/dev/null || rabbitmqctl -q eval 'node().' | tr -d "'")
if [ -z "${EAI_AMQP_URL:-}" ]; then
	vhost=eaimq-demo-$run
	if rabbitmqctl -n "$node" -q list_vhosts | grep -qxF "$vhost"; then
		echo "demo: vhost $vhost exists already; not touching it" >&2
		exit 1
	fi
	rabbitmqctl -n "$node" -q add_vhost "$vhost" >/dev/null
	own_vhost=1
	rabbitmqctl -n "$node" -q set_permissions -p "$vhost" guest '.*' '.*' '.*' >/dev/null
	export EAI_AMQP_URL="amqp://guest:guest@127.0.0.1:5672/$vhost"
else
	# (brokerstatus exits 78 on a broker without the lab's watermark: the
	# vhost line is printed all the same.)
	vhost=$({ bin/brokerstatus -o - 2>/dev/null || true; } | sed -n 's/^queues in vhost "\(.*\)":$/\1/p')
	own_vhost=
fi

step "topology (twice)"
bin/topology
bin/topology

step "claim system stand-in on 127.0.0.1:$port"
start_partner "$port" "$work/claimsys.log"
echo "claimsys: up (pid $partner_pid)"

step "publish (sample claims, guid suffix -$run)"
for f in scripts/claims/*.json; do
	sed "s/\"guid\": *\"\([^\"]*\)\"/\"guid\": \"\1-$run\"/" "$f" >"$work/$(basename "$f")"
done
bin/publish "$work"/*.json
echo "publishing good-1 again (same guid): the consumer must not call the claim system twice"
bin/publish "$work/good-1.json"

step "consumer for ${seconds}s"
bin/consumer --claim "http://127.0.0.1:$port" --max-seconds "$seconds" 2>"$work/consumer.log"
echo "(one log line per claim in the consumer's stderr; last lines:)"
tail -n 3 "$work/consumer.log" | cut -c1-160

step "report"
bin/claimsys -stats -addr "127.0.0.1:$port" >"$work/stats.txt"
bin/dlq -json list >"$work/dlq.json"
ok=1
printf "%-10s %-15s %5s  %-50s %s\n" CLAIM CLAIM_ID CALLS ENDED EXPECTED
while read -r guid calls want; do
	case "$guid" in ''|'#'*) continue ;; esac
	id="$guid-$run"
	claim_id=$(sed -n 's/.*"claimId": *"\([^"]*\)".*/\1/p' "$work/${guid#demo-}.json")
	got_calls=$(awk -v g="$id" '$1 == g {print $2}' "$work/stats.txt")
	accepted=$(awk -v g="$id" '$1 == g {print $3}' "$work/stats.txt")
	line=$(grep -F "\"message_id\":\"$id\"" "$work/dlq.json" || true)
	if [ -n "$line" ]; then
		kind=$(sed -n 's/.*"reason":"\([^"]*\)".*/\1/p' <<<"$line")
		why=$(sed -n 's/.*"our_reason":"\([^"]*\)".*/\1/p' <<<"$line")
		ended="dlq:$kind"
		shown="DLQ ($why)"
	elif [ "${accepted:-0}" -ge 1 ]; then
		ended=delivered
		shown=delivered
	else
		ended=nowhere
		shown="NOT FOUND (still queued?)"
	fi
	mark=ok
	if [ "$ended" != "$want" ] || [ "${got_calls:-0}" != "$calls" ]; then mark=MISMATCH; ok=; fi
	printf "%-10s %-15s %5s  %-50s %s calls, %s  %s\n" "${guid#demo-}" "$claim_id" "${got_calls:-0}" "$shown" "$calls" "$want" "$mark"
done <scripts/claims/expect.txt
echo
echo "queues in vhost \"$vhost\":"
rabbitmqctl -n "$node" -q list_queues -p "$vhost" name messages messages_unacknowledged | sed 's/^/  /'
echo
if [ -n "$ok" ]; then
	echo "demo: every claim ended where it should: none lost, none processed twice"
else
	echo "demo: some claims did not end where expected (see MISMATCH above)" >&2
	exit 1
fi
