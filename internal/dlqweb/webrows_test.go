package dlqweb

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/dlq"
	"eaimq/internal/pgtest"
	"eaimq/internal/store"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// The backend over ingested rows, on both stores: rowsWorld is a vhost
// with the topology and a store whose table of dead letters the test
// fills as dlq ingest would (dlq.RowOf), claim.dead itself empty.

var rowBackends = []struct {
	name string
	loc  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "processed.db") }},
	{"postgres", func(t *testing.T) string { return pgtest.New(t) }},
}

type rowsWorld struct {
	vh  *brokertest.VHost
	loc string
	st  store.Store
	dl  store.DeadLetters
}

func newRowsWorld(t *testing.T, loc string) *rowsWorld {
	vh := brokertest.New(t)
	conn := vh.Dial(t)
	if err := topo.DeclareFor(conn, topo.Classic); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	st, err := store.Open(loc, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	dl, ok := store.DeadLettersOf(st)
	if !ok {
		t.Fatal("the store has no table of dead letters")
	}
	return &rowsWorld{vh: vh, loc: loc, st: st, dl: dl}
}

// putRows writes n ingested dead letters, each with documents, so that
// the partner takes a replay of it.
func (w *rowsWorld) putRows(t *testing.T, prefix string, n int) {
	t.Helper()
	at := time.Now().Truncate(time.Second)
	rows := make([]deadletter.Row, n)
	for i := range rows {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		d := amqp.Delivery{MessageId: id, DeliveryMode: amqp.Persistent, ContentType: "application/json",
			Body: brokertest.Claim(id, "C-"+id, "r.pdf"),
			Headers: amqp.Table{"x-death": []any{amqp.Table{"queue": topo.Queue, "reason": "rejected", "count": int64(1), "time": at,
				"exchange": "eai.claim", "routing-keys": []any{"claim"}}}}}
		rows[i] = dlq.RowOf(d, time.Now().UTC())
	}
	if _, err := w.dl.PutDeadLetters(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
}

// row reads the one row of message_id id.
func (w *rowsWorld) row(t *testing.T, id string) deadletter.Row {
	t.Helper()
	rows, err := w.dl.DeadLetters(context.Background(), deadletter.Query{IDs: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows of %s, want 1", len(rows), id)
	}
	return rows[0]
}

// TestWebOverRows: where dead letters are ingested, the page's backend
// reads their rows (groups, a claim, the archive) and its actions change
// their states as the commands do: a retry sends a row once and a second
// retry finds nothing, a group purge keeps the rows as the archive, and a
// restore brings one back.
func TestWebOverRows(t *testing.T) {
	for _, be := range rowBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newRowsWorld(t, be.loc(t))
			w.putRows(t, "wr", 3)
			// A crash loop: its own group, whatever its record says.
			loop := amqp.Delivery{MessageId: "loop-0", Body: brokertest.Claim("loop-0", "C-loop-0"),
				Headers: amqp.Table{"x-death": []any{amqp.Table{"queue": topo.Queue, "reason": "delivery_limit", "count": int64(1), "time": time.Now()}}}}
			if _, err := w.dl.PutDeadLetters(context.Background(), []deadletter.Row{dlq.RowOf(loop, time.Now())}); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			page := &web{getenv: w.vh.Getenv(map[string]string{store.EnvPath: w.loc}), st: w.st, writable: true,
				c: dlq.Config{MaxReplays: dlq.DefaultMaxReplays, Actor: dlq.Actor{Who: "op"}}, log: io.Discard}
			o, err := page.Overview(ctx, true)
			if err != nil || len(o.Groups) != 2 || o.Groups[0].Count != 3 || o.Groups[1].Count != 1 || o.Looked != 4 || o.Total != 4 {
				t.Fatalf("groups over the rows: %+v %v", o, err)
			}
			// The GROUP BY's groups are groupOf's: the same ids as each
			// row read through the model.
			for _, g := range o.Groups {
				for _, r := range g.Claims {
					c, _, err := page.Claim(ctx, r.Key)
					if err != nil || c.GroupID != g.ID {
						t.Errorf("%s: in group %s (%s), its page says group %s (%v)", r.Key, g.ID, g.Reason, c.GroupID, err)
					}
				}
			}
			if o.Groups[1].Reason != dlq.CrashLoopWord {
				t.Errorf("the crash loop's group: %+v", o.Groups[1])
			}
			group := o.Groups[0].ID
			c, found, err := page.Claim(ctx, "wr-001")
			if err != nil || !found || c.ClaimID != "C-wr-001" || !strings.Contains(c.Body, `"claimId": "C-wr-001"`) {
				t.Fatalf("the claim's page from its row: %+v %v %v", c.Ref, found, err)
			}

			rep, err := page.Retry(ctx, "ann", Target{ID: "wr-001"})
			if err != nil || rep.Replayed != 1 {
				t.Fatalf("retry wr-001: %+v %v", rep, err)
			}
			if r := w.row(t, "wr-001"); r.State != deadletter.StateReplayed || r.StateBy != "ann" || r.StateVia != "dlq serve" {
				t.Errorf("the retried row: %q by %q via %q", r.State, r.StateBy, r.StateVia)
			}
			rep, err = page.Retry(ctx, "bob", Target{ID: "wr-001"})
			if err != nil || rep.Replayed != 0 || !rep.NotFound {
				t.Errorf("a second retry of wr-001: %+v %v", rep, err)
			}
			if n := w.vh.Depth(t, topo.Queue); n != 1 {
				t.Errorf("claim.in holds %d, want the one copy", n)
			}

			rep, err = page.Purge(ctx, "ann", Target{Group: group})
			if err != nil || rep.Purged != 2 {
				t.Fatalf("purge the group: %+v %v", rep, err)
			}
			l, err := page.Archive(ctx, 1)
			if err != nil || l.Count != 2 {
				t.Fatalf("the archive from the rows: %+v %v", l, err)
			}
			rep, err = page.Restore(ctx, "ann", Target{ID: "wr-002"})
			if err != nil || rep.Restored != 1 {
				t.Fatalf("restore wr-002: %+v %v", rep, err)
			}
			if o, err := page.Overview(ctx, true); err != nil || o.Looked != 2 || o.Depth != 2 {
				t.Errorf("groups after the purge and the restore: %+v %v", o, err)
			}

			// A page whose store was opened read-only reads the rows and
			// acts on none of them.
			page.writable = false
			if _, err := page.Retry(ctx, "ann", Target{ID: "wr-002"}); err == nil || !strings.Contains(err.Error(), "restart dlq serve") {
				t.Errorf("a retry through a read-only store: %v", err)
			}
			if r := w.row(t, "wr-002"); r.State != deadletter.StateDead {
				t.Errorf("wr-002 is %q after a refused retry", r.State)
			}
		})
	}
}

// TestWebPagesOverRows: over ingested rows, a group's pages and the
// search are the store's (dlq.Browser.RowPage): a group opened before the
// groups page was counted, its second page, a search by a part of a
// claimId in another letter case, and a search whose LIKE wildcards must
// match nothing but themselves.
func TestWebPagesOverRows(t *testing.T) {
	for _, be := range rowBackends {
		t.Run(be.name, func(t *testing.T) {
			w := newRowsWorld(t, be.loc(t))
			w.putRows(t, "pg", PerPage+5)
			loop := amqp.Delivery{MessageId: "loop-0", Body: brokertest.Claim("loop-0", "C-loop-0"),
				Headers: amqp.Table{"x-death": []any{amqp.Table{"queue": topo.Queue, "reason": "delivery_limit", "count": int64(1), "time": time.Now()}}}}
			if _, err := w.dl.PutDeadLetters(context.Background(), []deadletter.Row{dlq.RowOf(loop, time.Now())}); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			newPage := func() *web {
				return &web{getenv: w.vh.Getenv(map[string]string{store.EnvPath: w.loc}), st: w.st,
					c: dlq.Config{MaxReplays: dlq.DefaultMaxReplays}, log: io.Discard}
			}
			// The ids of the groups, from a page of its own.
			o, err := newPage().Overview(ctx, true)
			if err != nil || len(o.Groups) != 2 || o.Groups[0].Count != PerPage+5 {
				t.Fatalf("groups over the rows: %+v %v", o, err)
			}
			big := o.Groups[0]

			page := newPage() // nothing counted yet: the group's link opened first
			l, err := page.Group(ctx, big.ID, 2)
			if err != nil || l.Count != PerPage+5 || len(l.Refs) != 5 || l.Looked != PerPage+6 || l.Group.Reason != big.Reason {
				t.Fatalf("page 2 of group %s: count %d, %d refs, looked at %d, group %+v: %v", big.ID, l.Count, len(l.Refs), l.Looked, l.Group, err)
			}
			if l.Refs[0].Key != fmt.Sprintf("pg-%03d", PerPage) || l.Refs[4].Key != fmt.Sprintf("pg-%03d", PerPage+4) {
				t.Errorf("page 2 of the group: %s .. %s, want pg-%03d .. pg-%03d", l.Refs[0].Key, l.Refs[4].Key, PerPage, PerPage+4)
			}
			l, err = page.Group(ctx, o.Groups[1].ID, 1)
			if err != nil || l.Count != 1 || len(l.Refs) != 1 || l.Refs[0].Key != "loop-0" {
				t.Errorf("the crash loop's group: %+v %v", l, err)
			}
			if l, err = page.Group(ctx, "000000000000", 1); err != nil || l.Count != 0 || len(l.Refs) != 0 {
				t.Errorf("a group that is not there: %+v %v", l, err)
			}

			// claimIds C-pg-000 .. C-pg-104: "C-PG-10" is a part of five;
			// "PG-00" of ten message_ids (and their claimIds).
			l, err = page.Search(ctx, "C-PG-10", 1)
			if err != nil || l.Count != 5 || len(l.Refs) != 5 || l.Refs[0].ClaimID != "C-pg-100" || l.Looked != PerPage+6 {
				t.Errorf("search C-PG-10: count %d among %d, refs %+v: %v", l.Count, l.Looked, l.Refs, err)
			}
			if l, err = page.Search(ctx, "PG-00", 1); err != nil || l.Count != 10 || l.Refs[9].Key != "pg-009" {
				t.Errorf("search PG-00: count %d, refs %+v: %v", l.Count, l.Refs, err)
			}
			for _, q := range []string{"%", "pg_0", `\`} {
				if l, err := page.Search(ctx, q, 1); err != nil || l.Count != 0 {
					t.Errorf("search %q: count %d, want none (a wildcard is a character here): %v", q, l.Count, err)
				}
			}
		})
	}
}
