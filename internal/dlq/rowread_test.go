package dlq

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/claim"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
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

// TestLeanWalkAsWhole: a walk that reads the rows lean (list's: no
// properties, no body, only the headers parseHeaders reads) makes the
// same dead letters, field for field, as one that reads them whole, on
// both backends, for the live rows and the archive's: x-death of two
// entries, the deliveries, the replays, an edit, a purge header without
// an x-death, no headers, a record, a replaying row, and a claimId that
// is not UTF-8 (the whole row read again for its body: rowDead).
func TestLeanWalkAsWhole(t *testing.T) {
	for _, be := range ingestBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newIngestWorld(t, be.loc(t))
			at := time.Now().UTC().Truncate(time.Second)
			death := func(q string, n int64) amqp.Table {
				return amqp.Table{"queue": q, "reason": "rejected", "count": n, "time": at, "exchange": "eai.claim", "routing-keys": []any{"claim"}}
			}
			heads := []amqp.Table{
				{"x-death": []any{death(topo.Queue, 3), death("other", 1)}, "x-delivery-count": int64(4), "x-eaimq-replays": int32(2),
					"x-first-death-queue": topo.Queue, "custom": amqp.Table{"n": []any{int8(1), "x"}}},
				{"x-death": []any{amqp.Table{"queue": topo.Queue, "reason": "delivery_limit", "count": int64(1), "time": at}},
					editHeader: amqp.Table{"at": at, "by": "ann", "via": "dlq edit", "previous_sha256": "ab"}},
				{purgedHeader: amqp.Table{"at": at, "by": "bob", "via": "dlq purge", "from_queue": topo.Queue, "reason": "expired",
					"dead_lettered_at": at, "count": int64(2)}},
				nil,
			}
			var rows []deadletter.Row
			for i, h := range heads {
				id := fmt.Sprintf("lean-%d", i)
				m := parse(amqp.Delivery{MessageId: id, ContentType: "application/json", Headers: h, Body: brokertest.Claim(id, "C-"+id)}, false)
				if i == 0 {
					m.Known, m.Rec = true, claim.Record{MessageID: id, ClaimID: "C-" + id, Attempts: 2, LastStatus: 422, LastError: "no",
						Outcome: claim.Outcome{Reason: claim.Rejected}}
				}
				rows = append(rows, rowOf(m, at))
			}
			// A claimId with U+FFFD, which may be PostgreSQL's stand-in
			// for a byte that is not UTF-8: read from the body (rowDead),
			// so the lean walk reads that row whole (its guid, which only
			// the body's parse sets, says so to DeepEqual).
			bad := parse(amqp.Delivery{MessageId: "lean-bad", Headers: heads[0], Body: []byte(`{"guid":"lean-bad","claimId":"C-\ufffd"}`)}, false)
			rows = append(rows, rowOf(bad, at))
			if _, err := w.dl.PutDeadLetters(context.Background(), rows); err != nil {
				t.Fatal(err)
			}
			all := w.rows(t, deadletter.Query{})
			if _, err := w.dl.ChangeDeadLetters(context.Background(), deadletter.Change{Seqs: []int64{all[1].Seq}, From: deadletter.Live,
				To: deadletter.StateReplaying, By: "t", Via: "test", At: at}); err != nil {
				t.Fatal(err)
			}
			if _, err := w.dl.ChangeDeadLetters(context.Background(), deadletter.Change{Seqs: []int64{all[3].Seq}, From: deadletter.Live,
				To: deadletter.StatePurged, By: "t", Via: "test", At: at}); err != nil {
				t.Fatal(err)
			}
			conn := w.vh.Dial(t)
			walk := func(archive, lean bool) []*Dead {
				t.Helper()
				open := NewIngestedBrowser
				if archive {
					open = NewIngestedArchiveBrowser
				}
				b, err := open(conn, w.st)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				b.Lean = lean
				ms, _ := walkSelected(t, b, Config{})
				for _, m := range ms {
					m.d, m.row = amqp.Delivery{}, nil // the message and the row: what lean leaves out
				}
				return ms
			}
			for _, archive := range []bool{false, true} {
				whole, lean := walk(archive, false), walk(archive, true)
				if want := map[bool]int{false: 4, true: 1}[archive]; len(whole) != want {
					t.Fatalf("archive %v: %d rows walked, want %d", archive, len(whole), want)
				}
				if !reflect.DeepEqual(whole, lean) {
					for i := range whole {
						t.Errorf("archive %v, row %d:\nwhole %+v\nlean  %+v", archive, i, *whole[i], *lean[i])
					}
				}
			}
			// The bad claimId was read from its body, as before.
			for _, m := range walk(false, true) {
				if m.Key == "lean-bad" && (m.ClaimID != "C-\ufffd" || m.guid != "lean-bad") {
					t.Errorf("lean-bad: claimId %q, guid %q: not read from the body", m.ClaimID, m.guid)
				}
			}
		})
	}
}
