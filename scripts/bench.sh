#!/usr/bin/env bash
# bench.sh: the benchmarks behind docs/figures.md. Each compares with a
# ceiling measured in the same run on the same broker and reports a ratio;
# this script prints every figure with its target and PASS or MISS, then
# the same as the table in docs/figures.md (Markdown).
#
#   scripts/bench.sh             (about forty minutes on two cores: the
#                                store of 10,000,000 records and the
#                                million dead letters are built in bulk)
#   scripts/bench.sh -quick      (fewer rounds, no 200,000-claim RSS run)
#   scripts/bench.sh -report DIR (the figures again from a run's outputs)
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
quick=false
report=
case ${1:-} in
-quick) quick=true ;;
-report) report=${2:?-report needs the directory a run named} ;;
esac

# bench NAME PKG TIMES [ARGS...]: run one benchmark, keep its output.
bench() {
	local name=$1 pkg=$2 times=$3
	shift 3
	echo "== go test -run '^\$' -bench '$name' -benchtime $times $pkg $*" >&2
	# A benchmark that fails (a broker alarm, a consumer that exits) is
	# reported as NOT RUN below; the others still run.
	go test -run '^$' -bench "$name" -benchtime "$times" -timeout 60m "$pkg" "$@" | tee "$out/$name.txt" >&2 ||
		echo "bench.sh: $name failed" >&2
}

rounds=3
$quick && rounds=1
if [[ -n $report ]]; then
	out=$report
else
	EAIMQ_WATERMARK=own EAIMQ_STATUS_FILE=- scripts/mq-up.sh >/dev/null
	scripts/pg-up.sh >/dev/null
	out=$(mktemp -d /tmp/eaimq-bench.XXXXXX)
	echo "bench.sh: the outputs are kept in $out (scripts/bench.sh -report $out prints the figures again)" >&2
	run_all=true
fi
if [[ -n ${run_all:-} ]]; then
# Issue 33: PublishBulk alternates which runs first, publish or the bare
# loop, and needs two rounds for one of each order.
bench 'PublishBulk' ./publish "$((rounds * 2))x"
bench 'PublishVsBare' ./publish 20x
bench 'PublishProcess' ./publish 40x
bench 'PublishRSS' ./publish 1x
bench 'ConsumerVsBare' ./consumer "${rounds}x"
bench 'ConsumerSlowPartner' ./consumer "${rounds}x"
bench 'ConsumerMetricsCost' ./consumer 6x
bench 'ConsumerHistory' ./consumer "${rounds}x"
$quick || bench 'ConsumerRSS' ./consumer 1x
$quick || bench 'DLQListRSS' ./dlq 1x
$quick || bench 'DLQServeGroups' ./dlq 1x
# Dead letters at scale (issue 29; docs/figures.md): ingestion, and the
# read path over a million ingested rows.
$quick || bench 'DLQIngest' ./dlq 1x
$quick || bench 'DLQReplayRows' ./dlq 1x
$quick || bench 'DLQReplayPaced' ./dlq 1x
$quick || bench 'DLQReadMillion' ./dlq 1x
$quick || bench 'ConsumerLargeClaimsRSS' ./internal/e2e 1x
bench 'ScaleOutPostgres' ./consumer "${rounds}x"
bench 'StoreGrowth' ./internal/store 1x
bench 'BeginFinish$' ./internal/store 3000x
# Issue 33: each speed mechanism off alone against all on, alternated
# (the ablation table in docs/figures.md).
bench 'ConsumerAblation' ./consumer "$((rounds + 2))x"
bench 'StoreAblation' ./internal/store "$((rounds + 3))x"
fi

# metric NAME SUBBENCH UNIT: the value a benchmark reported in UNIT.
metric() {
	awk -v sub_="$2" -v unit="$3" '
		$1 ~ "^Benchmark" && index($1, sub_) {
			for (i = 3; i < NF; i++) if ($(i+1) == unit) { print $i; exit }
		}' "$out/$1.txt" 2>/dev/null
}

rows=()
fails=0
# figure WHAT VALUE OP TARGET COMMAND: one line, judged (OP ge, le, or -
# for a figure without a target).
figure() {
	local what=$1 value=$2 op=$3 target=$4 cmd=$5 verdict
	if [[ -z $value ]]; then
		verdict="NOT RUN"
		value="-"
	elif [[ $op == - ]]; then
		verdict="-"
	elif awk -v v="$value" -v t="$target" -v op="$op" 'BEGIN { exit !((op == "ge" && v >= t) || (op == "le" && v <= t)) }'; then
		verdict=PASS
	else
		verdict=MISS
		fails=$((fails + 1))
	fi
	local shown=$target
	case $op in ge) shown="≥ $target" ;; le) shown="≤ $target" ;; -) shown="" ;; esac
	printf '%-4s  %-78s %10s  %s\n' "$verdict" "$what" "$value" "$shown"
	rows+=("| $what | \`$cmd\` | **$value** | $shown | $verdict |")
}

b="go test -run '^\$' -bench"
echo
echo "Figures ($(date -u +%Y-%m-%d), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)):"
figure "bulk publish: one publish process, 20,000 files, exec to exit, vs a bare pipelined amqp091-go loop (window 256), publish first, median (range $(metric PublishBulk PublishBulk min-publish-first)–$(metric PublishBulk PublishBulk max-publish-first))" \
	"$(metric PublishBulk PublishBulk median-publish-first)" ge 0.9 "$b PublishBulk -benchtime 6x ./publish"
figure "the same, the bare loop first, median (range $(metric PublishBulk PublishBulk min-bare-first)–$(metric PublishBulk PublishBulk max-bare-first))" \
	"$(metric PublishBulk PublishBulk median-bare-first)" ge 0.9 "(the same)"
figure "bulk publish in process, 2,000 files, vs the bare loop" \
	"$(metric PublishVsBare PublishVsBare publish/bare)" ge 0.8 "$b PublishVsBare -benchtime 20x ./publish"
figure "one publish FILE process, ms (the bare process that dials, publishes one, waits for its confirm: $(metric PublishProcess PublishProcess bare-ms/process) ms)" \
	"$(metric PublishProcess PublishProcess ms/process)" le 15 "$b PublishProcess -benchtime 40x ./publish"
figure "peak RSS of one publish over 5,000 files of 1 MiB, MiB" \
	"$(metric PublishRSS PublishRSS MiB-peak-RSS)" le 64 "$b PublishRSS -benchtime 1x ./publish"
figure "consumer --sync full, prefetch 5, instant partner, vs a bare concurrent amqp091-go consumer (5 POSTs in flight, no store) ($(metric ConsumerVsBare instant claims/s-p5) vs $(metric ConsumerVsBare instant claims/s-bare-concurrent) claims/s)" \
	"$(metric ConsumerVsBare instant p5/bare-concurrent)" - "" "$b ConsumerVsBare -benchtime 3x ./consumer"
figure "the same vs the bare sequential loop (POST then ack, no store; $(metric ConsumerVsBare instant claims/s-bare-sequential) claims/s)" \
	"$(metric ConsumerVsBare instant p5/bare-sequential)" - "" "(the same)"
figure "the durable ceiling: the bare concurrent consumer, appending a line to a journal and waiting for an fdatasync before each ack, vs itself without ($(metric ConsumerVsBare instant claims/s-bare-concurrent-durable) claims/s; what fsync before the ack alone leaves at prefetch 5)" \
	"$(metric ConsumerVsBare instant bare-durable/bare-concurrent)" - "" "(the same)"
figure "consumer --sync full, prefetch 5, vs the durable ceiling (no dedup read, no database)" \
	"$(metric ConsumerVsBare instant p5/bare-concurrent-durable)" ge 0.9 "(the same)"
# Issue 33: the ceiling at prefetch 50 too, and CPU per claim (rusage of
# the test process, which also runs the partner, for every turn alike).
figure "consumer --sync full, prefetch 50, vs the durable ceiling with 50 in flight ($(metric ConsumerVsBare instant claims/s-bare-concurrent-durable-p50) claims/s)" \
	"$(metric ConsumerVsBare instant p50/bare-concurrent-durable-p50)" ge 0.9 "(the same)"
figure "CPU s per 10,000 claims, consumer at prefetch 5 ($(metric ConsumerVsBare instant cpu-s/10k-p5) s) / the durable ceiling at 5 in flight ($(metric ConsumerVsBare instant cpu-s/10k-durable) s)" \
	"$(metric ConsumerVsBare instant cpu-p5/cpu-durable)" le 1.5 "(the same)"
figure "CPU s per 10,000 claims, consumer at prefetch 50 ($(metric ConsumerVsBare instant cpu-s/10k-p50) s) / the durable ceiling at 50 in flight ($(metric ConsumerVsBare instant cpu-s/10k-durable-p50) s)" \
	"$(metric ConsumerVsBare instant cpu-p50/cpu-durable-p50)" le 1.5 "(the same)"
figure "consumer prefetch 50 vs prefetch 5, same run ($(metric ConsumerVsBare instant claims/s-p50) claims/s): not falling" \
	"$(metric ConsumerVsBare instant p50/p5)" ge 0.95 "(the same)"
figure "consumer prefetch 200 vs prefetch 5 ($(metric ConsumerVsBare instant claims/s-p200) claims/s): not falling" \
	"$(metric ConsumerVsBare instant p200/p5)" ge 0.95 "(the same)"
figure "consumer (prefetch 20) vs the bare sequential loop, partner at 2 ms" \
	"$(metric ConsumerVsBare 2ms consumer/bare)" - "" "(the same)"
figure "partner at 50 ms, prefetch 5, vs Little's law (100 claims/s)" \
	"$(metric ConsumerSlowPartner SlowPartner "of-little's-law")" ge 0.9 "$b ConsumerSlowPartner -benchtime 3x ./consumer"
figure "consumer with --metrics-addr (scraped every second) vs without, instant partner, alternating ($(metric ConsumerMetricsCost MetricsCost claims/s-with) vs $(metric ConsumerMetricsCost MetricsCost claims/s-without) claims/s)" \
	"$(metric ConsumerMetricsCost MetricsCost with/without)" ge 0.97 "$b ConsumerMetricsCost -benchtime 6x ./consumer"
figure "drain rate with 1,000,000 earlier records in the store vs an empty store (rounds' median $(metric ConsumerHistory records=1M median-full/empty-rate); CPU full/empty $(metric ConsumerHistory records=1M median-full/empty-cpu))" \
	"$(metric ConsumerHistory records=1M 1M/empty)" ge 0.95 "$b 'ConsumerHistory/records=1M' -benchtime 3x ./consumer"
figure "drain rate with 10,000,000 earlier records in the store vs an empty store (rounds' median $(metric ConsumerHistory records=10M median-full/empty-rate); CPU full/empty $(metric ConsumerHistory records=10M median-full/empty-cpu))" \
	"$(metric ConsumerHistory records=10M 10M/empty)" ge 0.9 "$b 'ConsumerHistory/records=10M' -benchtime 3x ./consumer"
figure "consumer RSS after 200,000 claims / after 10,000, one process ($(metric ConsumerRSS RSS MiB-at-10k) → $(metric ConsumerRSS RSS MiB-at-200k) MiB)" \
	"$(metric ConsumerRSS RSS rss200k/rss10k)" le 1.10 "$b ConsumerRSS -benchtime 1x ./consumer"
figure "consumer peak RSS over 40 claims of 16 MiB, prefetch 5, MiB (1 KiB claims: $(metric ConsumerLargeClaimsRSS LargeClaimsRSS MiB-peak-1KiB) MiB; bound: 16 + 4 x prefetch x 16 MiB)" \
	"$(metric ConsumerLargeClaimsRSS LargeClaimsRSS MiB-peak-16MiB)" le 336 "$b ConsumerLargeClaimsRSS -benchtime 1x ./internal/e2e"
figure "the same over 80 claims / over 40: not growing with the claims" \
	"$(metric ConsumerLargeClaimsRSS LargeClaimsRSS peak-80/peak-40)" le 1.15 "(the same)"
figure "SQLite file per 1,000,000 delivered claims, MiB (no retention)" \
	"$(metric StoreGrowth Growth MiB-per-1M-claims)" - "" "$b StoreGrowth -benchtime 1x ./internal/store"
figure "SQLite file after pruning 100,000 records and 100,000 more claims / after the first 100,000" \
	"$(metric StoreGrowth Growth size-after-prune+100k/100k)" le 1.05 "(the same)"
figure "three consumers on one PostgreSQL store vs one, partner at 50 ms" \
	"$(metric ScaleOutPostgres 3x-vs-1x 3x/1x)" ge 2.7 "$b ScaleOutPostgres -benchtime 3x ./consumer"
figure "one consumer on PostgreSQL vs on SQLite, instant partner" \
	"$(metric ScaleOutPostgres postgres-vs-sqlite postgres/sqlite)" ge 0.8 "(the same)"
figure "store alone: Begin + Finish per claim, sync=full, P=5, µs" \
	"$(awk '/sync=full\/P=5-/ { printf "%.0f", $3 / 1000 }' "$out/BeginFinish\$.txt" 2>/dev/null)" - "" "$b BeginFinish -benchtime 3000x ./internal/store"
figure "peak RSS of dlq list on 100,000 dead letters with their store records, MiB (first 10,000 only: $(metric DLQListRSS DLQListRSS MiB-at-10k) MiB; dlq -version: $(metric DLQListRSS DLQListRSS MiB-idle) MiB)" \
	"$(metric DLQListRSS DLQListRSS MiB-peak-RSS)" le 32 "$b DLQListRSS -benchtime 1x ./dlq"
figure "dlq list RSS over 100,000 dead letters / over the first 10,000 (-limit), same run" \
	"$(metric DLQListRSS DLQListRSS rss100k/rss10k)" le 1.10 "(the same)"
figure "dlq list over 100,000 dead letters with their store records, seconds" \
	"$(metric DLQListRSS DLQListRSS s/list)" le 10 "(the same)"
figure "the broker's peak RSS during that list / its memory watermark (before: $(metric DLQListRSS DLQListRSS MiB-broker-before) MiB; peak $(metric DLQListRSS DLQListRSS MiB-broker-peak) MiB; during the first 10,000: $(metric DLQListRSS DLQListRSS MiB-broker-peak-at-10k) MiB)" \
	"$(metric DLQListRSS DLQListRSS broker-peak/watermark)" le 1.0 "(the same)"
figure "dlq serve's groups page over 100,000 dead letters, first load (a walk): time to first byte, s (Count again now: $(metric DLQServeGroups DLQServeGroups s-ttfb-count-again) s; dlq serve's peak RSS $(metric DLQServeGroups DLQServeGroups MiB-serve-RSS) MiB)" \
	"$(metric DLQServeGroups DLQServeGroups s-ttfb-first)" - "" "$b DLQServeGroups -benchtime 1x ./dlq"
figure "the same page reloaded (the groups kept, no walk): time to first byte, ms" \
	"$(metric DLQServeGroups DLQServeGroups ms-ttfb-reload)" - "" "(the same)"
figure "the broker's peak RSS during the page's first walk / its watermark ($(metric DLQServeGroups DLQServeGroups MiB-broker-peak) MiB)" \
	"$(metric DLQServeGroups DLQServeGroups broker-peak/watermark)" - "" "(the same)"
# Issue 33: the ablation table, each mechanism's gain with it on over it
# off (median of the alternated rounds, and their range): no target here;
# docs/figures.md says which were kept and why.
for m in no-ack-batch no-solo no-known no-wal-sync; do
	for pf in 5 50; do
		figure "ablation: $m, consumer prefetch $pf, rate on/off (range $(metric ConsumerAblation "prefetch=$pf-" "min-on/off-rate-$m")–$(metric ConsumerAblation "prefetch=$pf-" "max-on/off-rate-$m")); CPU off/on $(metric ConsumerAblation "prefetch=$pf-" "median-off/on-cpu-$m") ($(metric ConsumerAblation "prefetch=$pf-" "min-off/on-cpu-$m")–$(metric ConsumerAblation "prefetch=$pf-" "max-off/on-cpu-$m"))" \
			"$(metric ConsumerAblation "prefetch=$pf-" "median-on/off-rate-$m")" - "" "$b ConsumerAblation -benchtime 5x ./consumer"
	done
	[[ $m == no-ack-batch ]] && continue # the relay's: no store column
	figure "ablation: $m, store alone (sync=full, P=5), rate on/off (range $(metric StoreAblation StoreAblation "min-on/off-rate-$m")–$(metric StoreAblation StoreAblation "max-on/off-rate-$m")); CPU off/on $(metric StoreAblation StoreAblation "median-off/on-cpu-$m") ($(metric StoreAblation StoreAblation "min-off/on-cpu-$m")–$(metric StoreAblation StoreAblation "max-off/on-cpu-$m"))" \
		"$(metric StoreAblation StoreAblation "median-on/off-rate-$m")" - "" "$b StoreAblation -benchtime 6x ./internal/store"
done
# Dead letters at scale (issue 29): docs/figures.md's section of that name.
figure "dlq ingest into SQLite, 100,000 dead letters of 1 KiB / a bare consumer that acks without storing, same run ($(metric DLQIngest DLQIngest dead/s-sqlite) vs $(metric DLQIngest DLQIngest dead/s-bare) dead letters/s)" \
	"$(metric DLQIngest DLQIngest sqlite/bare)" ge 0.8 "$b DLQIngest -benchtime 1x ./dlq"
figure "dlq ingest into PostgreSQL / the same bare consumer ($(metric DLQIngest DLQIngest dead/s-postgres) dead letters/s)" \
	"$(metric DLQIngest DLQIngest postgres/bare)" ge 0.6 "(the same)"
figure "the broker's peak RSS during an ingest / before it ($(metric DLQIngest DLQIngest MiB-broker-before) → $(metric DLQIngest DLQIngest MiB-broker-peak) MiB)" \
	"$(metric DLQIngest DLQIngest broker-peak/before)" le 1.1 "(the same)"
figure "the same during the bare consumer's run (what any consumer of claim.dead costs the broker)" \
	"$(metric DLQIngest DLQIngest broker-peak/before-bare)" - "" "(the same)"
figure "dlq replay -all -rate 0 of 100,000 ingested rows / publish over 100,000 files, exec to exit, same run ($(metric DLQReplayRows DLQReplayRows rows/s-replay) vs $(metric DLQReplayRows DLQReplayRows claims/s-publish) a second)" \
	"$(metric DLQReplayRows DLQReplayRows replay/publish)" ge 0.7 "$b DLQReplayRows -benchtime 1x ./dlq"
figure "the broker's peak RSS across both / its watermark ($(metric DLQReplayRows DLQReplayRows MiB-broker-peak) MiB)" \
	"$(metric DLQReplayRows DLQReplayRows broker-peak/watermark)" le 1.0 "(the same)"
figure "the broker's peak RSS through a replay of the same 100,000 rows at dlq's default pace (500 a second) / its watermark ($(metric DLQReplayPaced DLQReplayPaced MiB-broker-peak) MiB)" \
	"$(metric DLQReplayPaced DLQReplayPaced broker-peak/watermark)" le 1.0 "$b DLQReplayPaced -benchtime 1x ./dlq"
for be in sqlite postgres; do
	figure "$be: dlq -limit 50 list over 1,000,000 ingested, exec to exit (median of 5), ms" \
		"$(metric DLQReadMillion "DLQReadMillion/$be" ms-list-limit-50)" le 150 "$b DLQReadMillion -benchtime 1x ./dlq"
	figure "$be: dlq show CLAIMID over 1,000,000 ingested, exec to exit (median of 5), ms" \
		"$(metric DLQReadMillion "DLQReadMillion/$be" ms-show)" le 150 "(the same)"
	figure "$be: the whole dlq list over 1,000,000 ingested, streamed to a file, seconds" \
		"$(metric DLQReadMillion "DLQReadMillion/$be" s-list-all)" le 15 "(the same)"
	figure "$be: its peak RSS, MiB" \
		"$(metric DLQReadMillion "DLQReadMillion/$be" MiB-list-all-RSS)" le 64 "(the same)"
done
figure "the old queue walk over 100,000 with the default -max-held: the broker's peak RSS / its watermark (it stops at the bound and says so)" \
	"$(metric DLQListRSS DLQListRSS broker-peak/watermark-max-held)" le 1.5 "$b DLQListRSS -benchtime 1x ./dlq"
# The page's groups view over 1,000,000 ingested rows (≤ 1 s): its
# benchmark, DLQServeGroupsMillion, runs in DLQServeGroups' (the name
# matches both) and writes to its output.
for be in sqlite postgres; do
	figure "$be: dlq serve's groups view over 1,000,000 ingested, first load, time to first byte (median of 5), ms" \
		"$(metric DLQServeGroups "DLQServeGroupsMillion/$be" ms-ttfb-groups)" le 1000 "$b DLQServeGroupsMillion -benchtime 1x ./dlq"
	figure "$be: a group's second page over the same, ms" \
		"$(metric DLQServeGroups "DLQServeGroupsMillion/$be" ms-ttfb-group-page-2)" - "" "(the same)"
	figure "$be: the page's search by a part of a claimId over the same, ms" \
		"$(metric DLQServeGroups "DLQServeGroupsMillion/$be" ms-ttfb-search)" - "" "(the same)"
done

# scripts/test.sh is timed by itself (it runs the whole suite, about ten
# minutes); its last full run's time is read here.
tested=${XDG_CACHE_HOME:-$HOME/.cache}/eaimq/test-seconds
if [[ -r $tested ]]; then
	read -r secs when cpus <"$tested"
	figure "scripts/test.sh, the whole suite with its set-up, minutes (its last full run, $when, $cpus CPUs)" \
		"$(awk -v s="$secs" 'BEGIN { printf "%.1f", s / 60 }')" le 8 "scripts/test.sh"
else
	figure "scripts/test.sh, the whole suite with its set-up, minutes (run scripts/test.sh first)" "" le 8 "scripts/test.sh"
fi

echo
echo "| what | command | result | target | |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "$fails figure(s) missed their target"
