package dlq

import (
	"context"
	"testing"
	"time"

	"eaimq/internal/store/deadletter"
)

// TestListLimitSaysOverRows: over ingested rows, a walk counts how many
// a -limit left out exactly up to its MoreBound and says "over" past it
// (the count stops there); rows no longer live (replayed) are not
// counted; on both backends. (list's words for it: dlqcli's unlookedText.)
func TestListLimitSaysOverRows(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			rows := w.putRows(t, "lim", 12)
			conn := w.vh.Dial(t)
			walked := func(c Config) Walked {
				t.Helper()
				b, err := NewIngestedBrowser(conn, w.st)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				b.MoreBound = 5
				_, wk := walkSelected(t, b, c)
				return wk
			}
			for limit, want := range map[int]Walked{
				3: {Looked: 3, Unlooked: 5, Over: true},
				6: {Looked: 6, Unlooked: 5, Over: true},
				7: {Looked: 7, Unlooked: 5},
				8: {Looked: 8, Unlooked: 4},
				0: {Looked: 12},
			} {
				if wk := walked(Config{Limit: limit}); wk.Looked != want.Looked || wk.Unlooked != want.Unlooked || wk.Over != want.Over {
					t.Errorf("-limit %d: walked %+v, want %+v", limit, wk, want)
				}
			}
			// The last two replayed: the rest after the 8th are 2.
			if _, err := w.dl.ChangeDeadLetters(context.Background(), deadletter.Change{Seqs: []int64{rows[10].Seq, rows[11].Seq},
				From: deadletter.Live, To: deadletter.StateReplayed, By: "t", Via: "test", At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if wk := walked(Config{Limit: 8}); wk.Looked != 8 || wk.Unlooked != 2 || wk.Over {
				t.Errorf("-limit 8, the last two replayed: %+v", wk)
			}
		})
	}
}
