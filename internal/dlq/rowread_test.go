package dlq

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"eaimq/internal/store/deadletter"
)

// TestListLimitSaysOverRows: over ingested rows, list's last line says
// how many a -limit left out exactly up to listMoreBound and "over" it
// past (the count stops there), on stderr too with -json; rows no longer
// live (replayed) are not counted; on both backends.
func TestListLimitSaysOverRows(t *testing.T) {
	bound := listMoreBound
	listMoreBound = 5
	t.Cleanup(func() { listMoreBound = bound })
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			rows := w.putRows(t, "lim", 12)
			conn := w.vh.Dial(t)
			list := func(c Config) (string, string) {
				t.Helper()
				b, err := NewIngestedBrowser(conn, w.st)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				var out, errb bytes.Buffer
				if err := List(context.Background(), b, c, &out, &errb); err != nil {
					t.Fatalf("%v\n%s", err, errb.String())
				}
				return out.String(), errb.String()
			}
			for limit, want := range map[int]string{
				3: "3 dead letter(s) listed of 3 looked at; over 5 more in the store's ingested dead letters not looked at (-limit 3)",
				6: "; over 5 more in",
				7: "; 5 more in",
				8: "; 4 more in",
				0: "12 dead letter(s) listed of 12 looked at, from",
			} {
				if out, _ := list(Config{Limit: limit}); !strings.Contains(out, want) {
					t.Errorf("-limit %d list: want %q\n%s", limit, want, out)
				}
			}
			if _, errs := list(Config{Limit: 3, JSON: true}); !strings.Contains(errs, "dlq: over 5 more dead letter(s) in the store's ingested dead letters not looked at (-limit 3)") {
				t.Errorf("-json -limit 3 list's stderr:\n%s", errs)
			}
			// The last two replayed: the rest after the 8th are 2.
			if _, err := w.dl.ChangeDeadLetters(context.Background(), deadletter.Change{Seqs: []int64{rows[10].Seq, rows[11].Seq},
				From: deadletter.Live, To: deadletter.StateReplayed, By: "t", Via: "test", At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if out, _ := list(Config{Limit: 8}); !strings.Contains(out, "8 dead letter(s) listed of 8 looked at; 2 more in") {
				t.Errorf("-limit 8 list, the last two replayed:\n%s", out)
			}
		})
	}
}
