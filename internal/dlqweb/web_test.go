package dlqweb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/dlq"
	"eaimq/internal/redact"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

func (w *world) web() *web {
	w.t.Helper()
	st, err := store.Open(w.db, store.Options{ReadOnly: true})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { st.Close() })
	return &web{getenv: w.vh.Getenv(map[string]string{store.EnvPath: w.db}), st: st, c: dlq.Config{MaxReplays: dlq.DefaultMaxReplays}, log: io.Discard}
}

// TestServeGroupRetryWarnsOfArrivals: a dead letter that arrives in
// claim.dead while a group retry runs (here: between the confirms and the
// acks, the hook a crash test uses) is reported as arrived, and the retry
// still replays its group exactly.
func TestServeGroupRetryWarnsOfArrivals(t *testing.T) {
	w := mixedRun(t)
	be := w.web()
	o, err := be.Overview(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	var busy string
	for _, g := range o.Groups {
		if g.Reason == "failed-twice" && g.Count == 2 {
			busy = g.ID
		}
	}
	if busy == "" || len(o.Groups) != 2 || o.Looked != 4 {
		t.Fatalf("groups: %+v", o)
	}
	ch := w.vh.Channel(t)
	be.c.Hooks.AfterConfirm = func() error {
		return ch.Publish("", topo.DeadQueue, false, false, amqp.Publishing{MessageId: "late-0", Body: []byte(`{"guid":"late-0"}`)})
	}
	rep, err := be.Retry(context.Background(), "", Target{Group: busy})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Replayed != 2 || rep.Delivered != 0 || rep.Refused != 0 || rep.Arrived != 1 {
		t.Fatalf("report %+v: want 2 replayed, 1 arrived", rep)
	}
	if in, dead := w.vh.Depth(t, topo.Queue), w.vh.Depth(t, topo.DeadQueue); in != 2 || dead != 3 {
		t.Errorf("claim.in %d, claim.dead %d; want 2 and 3", in, dead)
	}
	// Without arrivals, none is reported.
	be.c.Hooks.AfterConfirm = nil
	rep, err = be.Purge(context.Background(), "", Target{ID: "late-0"})
	if err != nil || rep.Purged != 1 || rep.Arrived != 0 {
		t.Fatalf("purge: %+v %v", rep, err)
	}
}

// TestServeCleansSecrets: what the page shows of an error has neither the
// store's location nor the broker's password.
func TestServeCleansSecrets(t *testing.T) {
	env := map[string]string{broker.EnvURL: "amqp://ops:s3cr3t-pw@10.0.0.5:5672/claims", store.EnvPath: "/var/lib/eaimq/processed.db"}
	w := &web{getenv: func(k string) string { return env[k] }}
	got := w.clean("dial amqp://ops:s3cr3t-pw@10.0.0.5:5672/claims: refused; open /var/lib/eaimq/processed.db: denied; " +
		redact.URL(env[broker.EnvURL]))
	for _, secret := range []string{"s3cr3t-pw", "/var/lib/eaimq"} {
		if strings.Contains(got, secret) {
			t.Errorf("%q shows %q", got, secret)
		}
	}
}

// TestServeGroupListsAtMostMaxListed: a group counts every dead letter and
// lists the first MaxListed, so that the page of a big DLQ stays a
// page.
func TestServeGroupListsAtMostMaxListed(t *testing.T) {
	w := newWorld(t)
	n := MaxListed + 5
	ch := w.vh.Channel(t)
	for i := range n {
		if err := ch.Publish("", topo.DeadQueue, false, false, amqp.Publishing{MessageId: fmt.Sprintf("many-%03d", i), Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	brokertest.Eventually(t, 10*time.Second, "all in claim.dead", func() bool { return w.vh.Depth(t, topo.DeadQueue) == n })
	w.consume("1") // creates the store; claim.in is empty
	o, err := w.web().Overview(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Groups) != 1 || o.Groups[0].Count != n || len(o.Groups[0].Claims) != MaxListed || o.Groups[0].Reason != "unknown" {
		t.Fatalf("groups: %d, first %+v", len(o.Groups), o.Groups[0].Count)
	}
}

// TestServeArchiveRestore: the page's purge archives (the copy confirmed
// before the dead letter is acked: a crash between the two, the hook,
// leaves the claim in both queues, never in neither), the archive view
// lists it with who purged it, and its restore puts it back in claim.dead;
// restoring it twice finds nothing the second time, and a group is refused.
func TestServeArchiveRestore(t *testing.T) {
	w := mixedRun(t)
	be := w.web()
	ctx := context.Background()
	crash := errors.New("crash between confirm and ack")
	be.c.Hooks.AfterConfirm = func() error { return crash }
	if _, err := be.Purge(ctx, "ann", Target{ID: "nodocs-0"}); !errors.Is(err, crash) {
		t.Fatalf("purge with a crash after the confirm: %v", err)
	}
	if dead, arch := w.vh.Depth(t, topo.DeadQueue), w.vh.Depth(t, topo.ArchiveQueue); dead != 4 || arch != 1 {
		t.Fatalf("after the crash: claim.dead %d, archive %d; want 4 and 1 (in both)", dead, arch)
	}
	w.vh.Drain(t, topo.ArchiveQueue)
	be.c.Hooks.AfterConfirm = nil

	rep, err := be.Purge(ctx, "ann", Target{ID: "nodocs-0"})
	if err != nil || rep.Purged != 1 || !rep.Archive || rep.Lines[0] != "archived nodocs-0" {
		t.Fatalf("purge: %+v %v", rep, err)
	}
	l, err := be.Archive(ctx, 1)
	if err != nil || l.Count != 1 || len(l.Refs) != 1 || l.Refs[0].Key != "nodocs-0" || l.Refs[0].PurgedBy != "ann" || l.Refs[0].PurgedAt.IsZero() {
		t.Fatalf("archive: %+v %v", l, err)
	}
	if _, err := be.Restore(ctx, "bob", Target{Group: "x"}); err == nil {
		t.Error("a group restore was taken")
	}
	rep, err = be.Restore(ctx, "bob", Target{ID: "nodocs-0"})
	if err != nil || rep.Restored != 1 || rep.NotFound {
		t.Fatalf("restore: %+v %v", rep, err)
	}
	if dead, arch := w.vh.Depth(t, topo.DeadQueue), w.vh.Depth(t, topo.ArchiveQueue); dead != 4 || arch != 0 {
		t.Errorf("after restore: claim.dead %d, archive %d; want 4 and 0", dead, arch)
	}
	if rep, err = be.Restore(ctx, "bob", Target{ID: "nodocs-0"}); err != nil || !rep.NotFound || rep.Restored != 0 {
		t.Errorf("restore twice: %+v %v", rep, err)
	}
}
