package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"eaimq/internal/pgtest"
	"eaimq/internal/store/deadletter"
)

// BenchmarkPutDeadLetters is the store's share of dlq ingest: batches of
// 200 dead letters of about 1 KiB (a claim with a note), each row with its
// words (dead_letter_words), on both backends; rows/s is the figure.
//
//	go test -run '^$' -bench PutDeadLetters -benchtime 50x ./internal/store
func BenchmarkPutDeadLetters(b *testing.B) {
	for _, be := range []struct {
		name string
		loc  func(b *testing.B) string
	}{
		{"sqlite", func(b *testing.B) string { return filepath.Join(b.TempDir(), "p.db") }},
		{"postgres", func(b *testing.B) string { return pgtest.New(b) }},
	} {
		b.Run(be.name, func(b *testing.B) {
			s, err := Open(be.loc(b), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			dl, _ := DeadLettersOf(s)
			note := strings.Repeat("the partner refused the claim for missing documents ", 16)
			const batch = 200
			b.ResetTimer()
			for i := range b.N {
				rows := make([]deadletter.Row, batch)
				for j := range rows {
					id := fmt.Sprintf("g-%d-%d", i, j)
					rows[j] = deadletter.Row{CopyKey: "copy-" + id, MessageID: id, ClaimID: "C-" + id, GUID: id, Reason: "rejected", Status: 422,
						Properties: []byte(`{"table":{}}`), Headers: []byte(`{"table":{}}`), IngestedAt: time.Now(),
						Body: []byte(fmt.Sprintf(`{"guid":%q,"claimId":"C-%s","docs":[],"amount":1200,"note":%q}`, id, id, note))}
				}
				if _, err := dl.PutDeadLetters(context.Background(), rows); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
