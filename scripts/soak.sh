#!/usr/bin/env bash
# soak.sh: two consumers, a publisher and a stream of faults for SECONDS,
# then the accounting of every claim.
#
#   scripts/soak.sh [SECONDS]     default 60 (scripts/test.sh runs that form)
#
# The consumers run with --retry-delays 1s,3s --pause-when-down on one
# PostgreSQL store, against the stand-in claim system; the faults are
# consumers SIGKILLed and SIGTERMed and started again, the partner killed
# and brought back, the broker closing the consumers' connections. Of the
# claims, 10% have no documents (422), 5% are BUSY (503 every time), 5% are
# published twice. At the end everything runs healthy until claim.in and the
# delay queues are empty, and the last lines say what became of each claim:
# lost, unexpected, claims with more dead copies than published copies (a
# forked retry), calls per claim against their lineage's. It exits non-zero
# when a claim is lost, unexpected or forked. (It is internal/e2e's
# TestSoak: see docs/fault-suite.md.)
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
seconds=${1:-60}
case $seconds in '' | *[!0-9]*) echo "soak.sh: SECONDS is a whole number, not $seconds" >&2; exit 2 ;; esac
EAIMQ_WATERMARK=own EAIMQ_STATUS_FILE=- scripts/mq-up.sh >/dev/null
scripts/pg-up.sh >/dev/null
timeout=$((seconds + 600))s
go test -count=1 -timeout "$timeout" -run '^TestSoak$' -v ./internal/e2e -args -soak="${seconds}s" |
	grep -E '^(--- |FAIL|ok|PASS)|soak_test.go'
