#!/usr/bin/env bash
# test.sh: the whole test suite against the real broker, as CI runs it.
#
#   scripts/test.sh              everything: format, vet, tidy, go test -race, a bounded fuzz
#   scripts/test.sh -run Foo     extra arguments go to go test
#
# It first runs scripts/mq-up.sh (which leaves the watermark of a broker it
# did not start as it is), scripts/pg-up.sh and scripts/cluster.sh
# up, which install and start RabbitMQ, PostgreSQL and the local three-node
# cluster (beside the machine's broker, never instead) when this machine has
# none, and installs Debian's chromium and chromium-driver (dlq serve's
# browser test) when /usr/bin/chromium is missing, systemd (systemd-analyze,
# for the service units' test) and prometheus (promtool, for the alert
# rules) when those are. Every broker test makes its own temporary vhost,
# every store test its own database.
set -euo pipefail
began=$(date +%s)
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"

command -v go >/dev/null || { echo "test.sh: Go is not installed (https://go.dev/doc/install)" >&2; exit 1; }
command -v gcc >/dev/null || { echo "test.sh: gcc is needed for go-sqlite3 (cgo): apt-get install gcc" >&2; exit 1; }

echo "== broker"
EAIMQ_WATERMARK=own EAIMQ_STATUS_FILE=- scripts/mq-up.sh
echo "== postgresql"
scripts/pg-up.sh
echo "== local cluster (quorum queues, ports 5681-5683)"
scripts/cluster.sh up

# One partition run of at most 90 s on a cluster of its own in network
# namespaces (docs/fault-suite.md#network-partitions), before go test
# loads the machine; instance 9, so that a long partitions.sh run (instance
# 0 by default) may go on beside the suite. The script removes its
# namespaces on every exit; that they are gone is checked here, whatever
# the run's outcome.
echo "== network partitions, short (scripts/partitions.sh -short -instance 9)"
part_rc=0
scripts/partitions.sh -short -instance 9 || part_rc=$?
if ip netns list | grep -q '^eaimqp9-'; then
	echo "test.sh: partitions.sh left network namespaces behind: $(ip netns list | grep '^eaimqp9-' | tr '\n' ' ')" >&2
	exit 1
fi
[ "$part_rc" = 0 ] || { echo "test.sh: scripts/partitions.sh -short failed (exit $part_rc)" >&2; exit 1; }

say() { echo "test.sh: $*"; }
die() { echo "test.sh: $*" >&2; exit 1; }
. scripts/lib/apt.sh
echo "== chromium (the browser test of dlq serve)"
if [ ! -x /usr/bin/chromium ]; then
	apt_install chromium chromium-driver
fi
echo "== systemd-analyze and promtool (the service units, the alert rules)"
missing=()
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v promtool >/dev/null || missing+=(prometheus)
if [ ${#missing[@]} -gt 0 ]; then
	# Not prometheus's recommends: a node exporter is no test's business.
	apt_install --no-install-recommends "${missing[@]}"
fi

echo "== promtool: the alert rules and their unit tests"
# The scrape configuration is checked by TestPrometheusConfigExample: it
# reads its bearer token from a file (credentials_file), which promtool
# wants to exist and the repository must not hold (one committed would be
# a token every installation shares), so the test writes one first.
(
	cd deploy/prometheus
	promtool check rules eaimq.rules.yml
	promtool test rules eaimq.rules.test.yml
)

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change: $unformatted" >&2
	exit 1
fi

echo "== go vet"
go vet ./...

echo "== go mod tidy -diff"
go mod tidy -diff

# The fuzz runs beside go test, on one core (-parallel 1): it touches
# nothing but the guid rule, in process, so its time costs no wall time.
# Bounded by a count of inputs, not a time: with -fuzztime 20s, go's fuzz
# engine itself failed once on a loaded machine with "context deadline
# exceeded" and no failing input (its deadline met a worker mid-input).
# Its output is shown after go test's, so that the two do not interleave;
# when go test fails, the script stops the fuzz's go command as it exits.
fuzzlog=$(mktemp)
go test -run '^$' -fuzz '^FuzzGuid$' -fuzztime 40000x -parallel 1 ./internal/claimid >"$fuzzlog" 2>&1 &
fuzz=$!

# -parallel: the e2e tests that may run side by side (docs/tests.md) mostly
# wait, on the broker and on the outages they hold, so more of them at
# once than there are cores (go test's default) shortens the run.
#
# internal/e2e, the longest package, has a go test of its own, started
# first: in one go test ./... it waited for one of the -p (cores) slots
# behind consumer and dlq, the next longest, and the three ran end to end.
# Its output is shown after the other packages', whole.
: "${EAIMQ_TEST_PARALLEL:=4}"
echo "== go test -race (-parallel $EAIMQ_TEST_PARALLEL; internal/e2e beside the rest)"
e2elog=$(mktemp)
go test -race -count=1 -timeout 30m -parallel "$EAIMQ_TEST_PARALLEL" "$@" ./internal/e2e >"$e2elog" 2>&1 &
e2e=$!
trap '{ kill "$fuzz" "$e2e" 2>/dev/null || true; }; rm -f "$fuzzlog" "$e2elog"; remove_policy' EXIT
# internal/partition is the harness partitions.sh drives (its step above
# ran it); alone, without the cluster, its test would only skip.
rest=$(go list ./... | grep -vx -e 'eaimq/internal/e2e' -e 'eaimq/internal/partition')
failed=
# shellcheck disable=SC2086 # one word per package
go test -race -count=1 -timeout 30m -parallel "$EAIMQ_TEST_PARALLEL" "$@" $rest || failed=1
wait "$e2e" || failed=1
cat "$e2elog"
[ -z "$failed" ] || die "go test failed"

echo "== fuzz claimid.Guid (40,000 inputs, beside go test)"
if ! wait "$fuzz"; then
	cat "$fuzzlog"
	die "the fuzz of claimid.Guid failed"
fi
cat "$fuzzlog"

took=$(($(date +%s) - began))
echo "test.sh: every step passed in $((took / 60))m$((took % 60))s"
# The last full run's time, for scripts/bench.sh's figure (a run with
# arguments runs part of the suite and is not kept).
if [[ $# -eq 0 ]]; then
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/eaimq
	mkdir -p "$cache" && echo "$took $(date -u +%Y-%m-%dT%H:%MZ) $(nproc)" >"$cache/test-seconds" || true
fi
