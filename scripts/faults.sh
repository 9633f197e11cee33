#!/usr/bin/env bash
# faults.sh: the fault suite alone, with its results table (for docs/fault-suite.md).
#
#   scripts/faults.sh            prints the table; scripts/test.sh runs it too
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
EAIMQ_WATERMARK=own EAIMQ_STATUS_FILE=- scripts/mq-up.sh >/dev/null
scripts/pg-up.sh >/dev/null
scripts/cluster.sh up >/dev/null
report=$(mktemp)
trap 'rm -f "$report"' EXIT
EAIMQ_FAULT_REPORT=$report go test -count=1 -run 'Fault' ./internal/e2e
cat "$report"
