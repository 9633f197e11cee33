package dlqweb

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/audit"
	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/dlq"
	"eaimq/internal/partner"
	"eaimq/internal/topo"
)

// webWithTrail is w.web() with the audit trail beside the store.
func (w *world) webWithTrail() *web {
	be := w.web()
	tr, err := audit.Open(context.Background(), w.db)
	if err != nil {
		w.t.Fatal(err)
	}
	be.trail, be.c.Actor, be.log = tr, dlq.Actor{Who: "operator", Via: "dlq serve"}, io.Discard
	return be
}

// TestGroupsKept is item 7's groups view: a reload with nothing changed
// shows the groups kept, without a walk (the same count time); a new dead
// letter (the depth changed) is counted again once the rest after the last
// walk is over; an action makes them stale at once; refresh walks now.
func TestGroupsKept(t *testing.T) {
	w := mixedRun(t)
	be := w.webWithTrail()
	ctx := context.Background()
	first, err := be.Overview(ctx, false)
	if err != nil || first.Cached || first.Looked != 4 {
		t.Fatalf("first: %+v %v", first, err)
	}
	again, err := be.Overview(ctx, false)
	if err != nil || !again.Cached || !again.At.Equal(first.At) || again.Depth != 4 {
		t.Fatalf("a reload with nothing changed walked again: %+v %v", again, err)
	}
	w.deadLetter(amqp.Publishing{MessageId: "late-0", Body: brokertest.Claim("late-0", "C-late")})
	brokertest.Eventually(t, 10*time.Second, "the depth changed and the rest is over", func() bool {
		o, err := be.Overview(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if o.Cached && o.Depth != 5 {
			t.Fatalf("kept groups with the depth of before: %+v", o)
		}
		return !o.Cached && o.Looked == 5
	})
	kept, _ := be.Overview(ctx, false)
	if !kept.Cached {
		t.Fatalf("not kept after the new count: %+v", kept)
	}
	if _, err := be.Purge(ctx, "", Target{ID: "late-0"}); err != nil {
		t.Fatal(err)
	}
	after, _ := be.Overview(ctx, false)
	if after.Cached || after.Looked != 4 {
		t.Errorf("after a purge: %+v, want a new count of 4", after)
	}
	forced, _ := be.Overview(ctx, true)
	if forced.Cached || !forced.At.After(after.At) {
		t.Errorf("refresh: %+v", forced)
	}
}

// TestSearchAndPages: search finds dead letters by a part of their id or
// claimId, letter case aside, one page of PerPage at a time with
// the count of all; a group's pages list all of it.
func TestSearchAndPages(t *testing.T) {
	w := newWorld(t)
	n := 2*PerPage + 7
	var msgs []amqp.Publishing
	for i := range n {
		id := fmt.Sprintf("many-%03d", i)
		msgs = append(msgs, amqp.Publishing{MessageId: id, Body: brokertest.Claim(id, fmt.Sprintf("C-MANY-%03d", i)), DeliveryMode: 2})
	}
	w.deadLetter(msgs...)
	w.consume("1") // the store
	be := w.webWithTrail()
	ctx := context.Background()
	l, err := be.Search(ctx, "c-many-01", 1)
	if err != nil || l.Count != 10 || len(l.Refs) != 10 || l.Refs[0].ClaimID != "C-MANY-010" || l.Looked != n {
		t.Fatalf("search: %+v %v", l, err)
	}
	l, _ = be.Search(ctx, "many", 3)
	if l.Count != n || len(l.Refs) != 7 || l.Refs[0].Key != "many-200" || l.Pages() != 3 {
		t.Errorf("search page 3: count %d, %d refs, first %+v", l.Count, len(l.Refs), l.Refs)
	}
	o, _ := be.Overview(ctx, false)
	if len(o.Groups) != 1 {
		t.Fatalf("groups: %+v", o.Groups)
	}
	g := o.Groups[0]
	p2, err := be.Group(ctx, g.ID, 2)
	if err != nil || p2.Count != n || len(p2.Refs) != PerPage || p2.Refs[0].Key != "many-100" || p2.Group.Reason != "unknown" {
		t.Errorf("group page 2: %+v %v", p2.Group, err)
	}
	if l, _ := be.Search(ctx, "nothing-like-it", 1); l.Count != 0 || l.Looked != n {
		t.Errorf("a search that finds nothing: %+v", l)
	}
}

// TestPageEditRecordsAndRefusesStale: the page's edit and retry writes the
// new Idempotency-Key into x-eaimq-edited and the trail, names who; an
// edit of a body that is not the dead letter's any more is refused; the
// claim page shows the claim's history.
func TestPageEditRecordsAndRefusesStale(t *testing.T) {
	w := mixedRun(t)
	be := w.webWithTrail()
	ctx := context.Background()
	c, found, err := be.Claim(ctx, "nodocs-0")
	if err != nil || !found || c.BodySHA256 == "" {
		t.Fatalf("claim: %v %v", found, err)
	}
	body := []byte(`{"guid":"nodocs-0","claimId":"C-N0","docs":["r.pdf"]}`)
	rep, err := be.EditRetry(ctx, "alice", "nodocs-0", body, strings.Repeat("0", 64))
	if err != nil || rep.Replayed != 0 || rep.Refused != 1 || !strings.Contains(strings.Join(rep.Lines, "\n"), "changed since it was read") {
		t.Fatalf("a stale edit: %+v %v", rep, err)
	}
	rep, err = be.EditRetry(ctx, "alice", "nodocs-0", body, c.BodySHA256)
	if err != nil || rep.Replayed != 1 {
		t.Fatalf("edit: %+v %v", rep, err)
	}
	d := w.vh.Drain(t, topo.Queue)
	key := partner.EditKey("nodocs-0", body)
	if len(d) != 1 {
		t.Fatalf("claim.in: %d", len(d))
	}
	if e, _ := d[0].Headers[partner.EditedHeader].(amqp.Table); e == nil || e[partner.EditedKey] != key || e["by"] != "alice" ||
		e["via"] != "dlq serve" || e["previous_sha256"] != c.BodySHA256 {
		t.Errorf("x-eaimq-edited: %+v", e)
	}
	// Dead-lettered again, its page shows both entries, with who.
	w.deadLetter(amqp.Publishing{MessageId: "nodocs-0", Body: d[0].Body, Headers: d[0].Headers, DeliveryMode: 2})
	c, _, err = be.Claim(ctx, "nodocs-0")
	if err != nil || len(c.Events) != 2 {
		t.Fatalf("events: %+v %v", c.Events, err)
	}
	if e := c.Events[1]; e.Who != "alice" || e.Action != "edit" || e.Result != audit.Done || !strings.Contains(e.Note, key) {
		t.Errorf("the edit's event: %+v", e)
	}
	if e := c.Events[0]; e.Result != audit.Partial || !strings.Contains(e.Note, "changed since") {
		t.Errorf("the refused edit's event: %+v", e)
	}
	// On loopback without tokens, who is whoever runs the page.
	ok := 201
	w.partner.Set(claimsys.Control{ForceStatus: &ok})
	if _, err := be.Retry(ctx, "", Target{ID: "busy-0"}); err != nil {
		t.Fatal(err)
	}
	var last audit.Entry
	be.trail.Entries(ctx, "busy-0", func(e audit.Entry) error { last = e; return nil })
	if last.Who != "operator" || last.Via != "dlq serve (loopback, no token)" || last.Target != "claim busy-0" {
		t.Errorf("loopback retry: %+v", last)
	}
}

// TestHealthAndBanner: /healthz's backend says the broker and the store
// answer, and the depth; the banner names the broker without its user or
// password.
func TestHealthAndBanner(t *testing.T) {
	w := mixedRun(t)
	be := w.webWithTrail()
	if h := be.Health(context.Background()); !h.OK || h.Depth != 4 || h.Store != "ok" {
		t.Errorf("health: %+v", h)
	}
	be.st.Close()
	if h := be.Health(context.Background()); h.OK || h.Store == "ok" {
		t.Errorf("health with a closed store: %+v", h)
	}
	b := bannerOf("amqp://ops:s3cr3t@mq1.example:5672/claims,amqps://ops:s3cr3t@mq2.example/claims")
	if b.Broker != "amqp://mq1.example:5672, amqps://mq2.example:5671" || b.VHost != "claims" || b.Queue != "claim.dead" {
		t.Errorf("banner: %+v", b)
	}
	if b := bannerOf(w.vh.URL); strings.Contains(b.Broker, "guest") {
		t.Errorf("banner shows the user: %+v", b)
	}
	if b := bannerOf(broker.URL(func(string) string { return "" })); b.VHost != "/" {
		t.Errorf("default banner: %+v", b)
	}
}
