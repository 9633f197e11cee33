#!/usr/bin/env bash
# model.sh: the model checker's deeper configuration (docs/model.md): more
# faults in one trace, and three claims with three consumers. No server needed. Its last line is
# the summary: model: N states, longest trace D, fixpoint reached, faults fired: ...
#
#   scripts/model.sh             the deeper run (go test -model.deep)
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
go test -count=1 -timeout 60m -run '^TestDeep$' -v ./internal/model -model.deep >"$out" 2>&1 || status=$?
grep -v '^model: ' "$out" || true
grep '^model: ' "$out" | tail -1 || echo "model: no summary (the test failed before it; see above)"
exit "$status"
