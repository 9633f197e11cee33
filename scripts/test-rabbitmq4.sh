#!/usr/bin/env bash
# test-rabbitmq4.sh: the broker-facing tests and the end-to-end suite
# against a RabbitMQ 4 node instead of this machine's 3.x broker.
#
#   scripts/test-rabbitmq4.sh            the packages, then internal/e2e
#   scripts/test-rabbitmq4.sh -run Foo   extra arguments go to go test
#
# The node is the one rabbitmq4.sh runs (RabbitMQ 4.0.5 from Debian trixie,
# in a chroot, AMQP on 127.0.0.1:5700): $RABBITMQ4 names that script,
# else ../shared/rabbitmq4.sh beside the repository (or beside its
# worktree's parent) is used; it is started when it is not running. The
# tests reach it through EAIMQ_TEST_AMQP_URL and EAIMQ_RABBITMQCTL (its
# rabbitmqctl), which the programs they run read too (docs/tests.md). The
# tests that start nodes of their own (the local cluster, the private
# nodes of some fault rows and benchmarks) run on this machine's RabbitMQ
# whatever these say.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"

rmq4=${RABBITMQ4:-}
if [[ -z $rmq4 ]]; then
	for c in "$top/../shared/rabbitmq4.sh" "$top/../../shared/rabbitmq4.sh"; do
		[[ -x $c ]] && { rmq4=$(realpath "$c"); break; }
	done
fi
[[ -n $rmq4 && -x $rmq4 ]] || { echo "test-rabbitmq4.sh: no rabbitmq4.sh (set RABBITMQ4 to its path)" >&2; exit 1; }
[[ $rmq4 != *" "* ]] || { echo "test-rabbitmq4.sh: $rmq4: a path without spaces, please (EAIMQ_RABBITMQCTL is split at spaces)" >&2; exit 1; }

echo "== RabbitMQ 4 node ($rmq4)"
"$rmq4" status || "$rmq4" up
port=${RMQ4_PORT:-5700}
export EAIMQ_TEST_AMQP_URL=${EAIMQ_TEST_AMQP_URL:-amqp://guest:guest@127.0.0.1:$port/}
export EAIMQ_RABBITMQCTL="$rmq4 ctl"
echo "EAIMQ_TEST_AMQP_URL=$EAIMQ_TEST_AMQP_URL EAIMQ_RABBITMQCTL=\"$EAIMQ_RABBITMQCTL\""

# The local cluster and PostgreSQL, for the rows that need them (they
# stay on this machine's RabbitMQ 3.x and PostgreSQL).
EAIMQ_WATERMARK=own EAIMQ_STATUS_FILE=- scripts/mq-up.sh >/dev/null
scripts/pg-up.sh >/dev/null
scripts/cluster.sh up >/dev/null

pkgs=(./topology ./publish ./consumer ./dlq ./claimsys ./brokerstatus $(go list ./internal/... | grep -v '/internal/e2e$'))
echo "== go test ${pkgs[*]}"
go test -count=1 "$@" "${pkgs[@]}"
echo "== go test ./internal/e2e"
go test -count=1 -timeout 60m "$@" ./internal/e2e
