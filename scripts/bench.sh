#!/usr/bin/env bash
# bench.sh: the benchmarks behind the README's figures. Each compares with a
# ceiling measured in the same run on the same broker and reports a ratio.
#
#   scripts/bench.sh             (about two minutes)
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
scripts/mq-up.sh >/dev/null
scripts/pg-up.sh >/dev/null
go test -run '^$' -bench 'PublishVsBare' -benchtime 20x ./publish
go test -run '^$' -bench 'PublishProcess' -benchtime 40x ./publish
go test -run '^$' -bench 'PublishRSS' -benchtime 1x ./publish
go test -run '^$' -bench 'ConsumerVsBare' -benchtime 3x ./consumer
go test -run '^$' -bench 'ConsumerSlowPartner' -benchtime 3x ./consumer
go test -run '^$' -bench 'ConsumerMetricsCost' -benchtime 6x ./consumer
go test -run '^$' -bench 'BeginFinish' -benchtime 3000x ./internal/store
go test -run '^$' -bench 'ScaleOutPostgres' -benchtime 3x ./consumer
