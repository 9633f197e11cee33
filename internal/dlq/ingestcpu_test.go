package dlq

import (
	"context"
	"io"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/store"
)

// BenchmarkIngestBatch is dlq ingest's CPU per dead letter in process,
// the broker left out: batches of DefaultIngestBatch dead letters of
// about 1 KiB (benchDead) made into rows (rowsOf: parse, the store's
// records, rowOf) and committed into SQLite (put), as flush does. A CPU
// profile of it (-cpuprofile) says where an ingest's time goes.
//
//	go test -run '^$' -bench IngestBatch -benchtime 500x ./internal/dlq
func BenchmarkIngestBatch(b *testing.B) {
	st, err := store.Open(filepath.Join(b.TempDir(), "p.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	dl, _ := store.DeadLettersOf(st)
	in := &ingester{c: IngestConfig{}.withDefaults(), st: st, dl: dl, log: io.Discard}
	batch := make([]amqp.Delivery, in.c.Batch)
	ctx := context.Background()
	n := 0
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		for j := range batch {
			batch[j] = benchDead(n)
			n++
		}
		b.StartTimer()
		c0 := processCPU()
		rows, err := in.rowsOf(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		if err := in.put(ctx, rows); err != nil {
			b.Fatal(err)
		}
		cpu += processCPU() - c0
	}
	// The process's CPU, every goroutine's (the store's writer, the GC),
	// over the batches: what the shared cores' load makes of the wall
	// time is left out.
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/dead")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the CPU this process has taken, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
