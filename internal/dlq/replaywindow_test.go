package dlq

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"eaimq/internal/store"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// TestReplayRowsWindow: a bulk replay over ingested rows flushes
// rowsWindow rows at a time unpaced, and at most -rate a time paced; each
// flush's rows are marked replayed before the next is claimed, every row
// is sent once, and each is replayed when it ends.
func TestReplayRowsWindow(t *testing.T) {
	for _, tc := range []struct {
		rate    float64
		n       int
		flushes []int // progress after each flush: how many replayed so far
	}{
		{0, 2*rowsWindow + 500, []int{rowsWindow, 2 * rowsWindow, 2*rowsWindow + 500}},
		{400, 1000, []int{400, 800, 1000}},
	} {
		t.Run(fmt.Sprintf("rate-%g", tc.rate), func(t *testing.T) {
			w := newIngestWorld(t, filepath.Join(t.TempDir(), "processed.db"))
			w.putRows(t, "ww", tc.n)
			st, err := store.Open(w.loc, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			conn := w.vh.Dial(t)
			defer conn.Close()
			b, err := NewIngestedBrowser(conn, st)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			c := Config{MaxReplays: DefaultMaxReplays, Rate: tc.rate, Actor: Actor{Who: "tester", Via: "dlq replay"}}
			f := newFilter(c)
			b.narrowTo(c)
			var flushes []int
			r := rules{maxReplays: c.MaxReplays, actor: c.Actor, rate: c.Rate, progress: func(n int) {
				// The rows of this flush are marked already, and none
				// of the next is claimed yet.
				if got := len(w.rows(t, deadletter.Query{States: []deadletter.State{deadletter.StateReplayed}})); got != n {
					t.Errorf("after a flush %d replayed so far, %d rows replayed", n, got)
				}
				if got := len(w.rows(t, deadletter.Query{States: []deadletter.State{deadletter.StateReplaying}})); got != 0 {
					t.Errorf("after a flush %d rows replaying, want 0", got)
				}
				flushes = append(flushes, n)
			}}
			tl, err := replayDead(context.Background(), b, f.selection(), r, func(note) {})
			if err != nil {
				t.Fatal(err)
			}
			if tl.replayed != tc.n || !slices.Equal(flushes, tc.flushes) {
				t.Errorf("%d replayed in flushes %v, want %d in %v", tl.replayed, flushes, tc.n, tc.flushes)
			}
			if d := w.vh.Depth(t, topo.Queue); d != tc.n {
				t.Errorf("claim.in holds %d copies, want %d", d, tc.n)
			}
			if got := len(w.rows(t, deadletter.Query{States: []deadletter.State{deadletter.StateReplayed}})); got != tc.n {
				t.Errorf("%d rows replayed, want %d", got, tc.n)
			}
		})
	}
}
