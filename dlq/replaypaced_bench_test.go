package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/rabbitctl"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// BenchmarkDLQReplayPaced: the broker's memory through a replay of
// 100,000 ingested rows at dlq's default pace over rows (500 a second),
// as an operator runs it, into a claim.in that nothing consumes: its peak
// resident memory against its watermark, sampled every 20 ms (issue 29:
// the broker below its watermark throughout). BenchmarkDLQReplayRows
// measures the unpaced replay's speed against publish's, and with it
// the broker under 100,000 messages sent as fast as it takes them, by
// either program; this is the same node, watermark and rows at the pace
// a replay has unless it is told otherwise.
//
//	go test -run '^$' -bench DLQReplayPaced -benchtime 1x ./dlq
func BenchmarkDLQReplayPaced(b *testing.B) {
	brokertest.PrivateNode(b, replayNode, replayPort)
	ctl, base := rabbitctl.Ctl{Node: replayNode}, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", replayPort)
	vh := brokertest.NewOn(b, ctl, base)
	vh.Topology(b)
	dlqBin := brokertest.Binary(b, "eaimq/dlq")
	mem := brokerMemory(b, replayNode)
	var before, peak int64
	var took time.Duration
	for b.Loop() {
		db := filepath.Join(b.TempDir(), "processed.db")
		env := append(os.Environ(), broker.EnvURL+"="+vh.URL, store.EnvPath+"="+db)
		deadLetters(b, vh, db, replayRows)
		ingestAll(b, dlqBin, env, db, vh, replayRows)
		cmd := exec.Command(dlqBin, "-reason", "rejected", "replay", "-all")
		cmd.Env = env
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		m0 := mem.now()
		mem.start()
		t0 := time.Now()
		err := cmd.Run()
		took += time.Since(t0)
		m1 := mem.stop()
		if err != nil {
			b.Fatalf("dlq replay: %v\n%s", err, tail(errb.String()))
		}
		if want := fmt.Sprintf("dlq: %d replayed, 0 skipped", replayRows); !strings.Contains(out.String(), want) {
			b.Fatalf("dlq replay: want %q in its output; its last lines:\n%s", want, tail(out.String()))
		}
		if n := vh.Depth(b, topo.Queue); n != replayRows {
			b.Fatalf("after dlq replay claim.in holds %d, want %d", n, replayRows)
		}
		b.Logf("the broker during a paced replay of %d rows (%s): %.1f → %.1f MiB at its peak (watermark %.0f)", replayRows,
			time.Since(t0).Round(time.Second), float64(m0)/(1<<20), float64(m1)/(1<<20), float64(mem.limit)/(1<<20))
		if m1 > peak {
			before, peak = m0, m1
		}
		purgeQueue(b, vh, topo.Queue)
	}
	b.ReportMetric(float64(replayRows*b.N)/took.Seconds(), "rows/s-replay")
	mem.report(b, before, peak)
}
