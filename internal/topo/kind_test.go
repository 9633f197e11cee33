package topo_test

import (
	"slices"
	"testing"

	"eaimq/internal/brokertest"
	"eaimq/internal/topo"
)

// TestInspectQueue: each type is told apart from the other by the broker
// itself, a queue that matches neither is named with the broker's reasons,
// and the probe creates nothing.
func TestInspectQueue(t *testing.T) {
	for _, kind := range topo.QueueTypes {
		t.Run(string(kind), func(t *testing.T) {
			vh := brokertest.New(t)
			conn := vh.Dial(t)
			if st, err := topo.InspectQueue(conn, topo.Queue); err != nil || st.Exists {
				t.Fatalf("before: %+v, %v; want missing", st, err)
			}
			if len(vh.Queues(t)) != 0 {
				t.Fatal("InspectQueue created a queue")
			}
			if err := topo.DeclareFor(conn, kind); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{topo.Queue, topo.DeadQueue} {
				st, err := topo.InspectQueue(conn, name)
				if err != nil || !st.Exists || st.Type != kind {
					t.Errorf("%s: %+v, %v; want %s", name, st, err, kind)
				}
			}
			if got := topo.QueuesIn(conn); !slices.EqualFunc(got, topo.QueuesFor(kind), func(a, b topo.QueueSpec) bool { return a.String() == b.String() }) {
				t.Errorf("QueuesIn: %v, want %v", got, topo.QueuesFor(kind))
			}
		})
	}
	t.Run("neither", func(t *testing.T) {
		vh := brokertest.New(t)
		ch := vh.Channel(t)
		if _, err := ch.QueueDeclare(topo.Queue, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		st, err := topo.InspectQueue(vh.Dial(t), topo.Queue)
		if err != nil || !st.Exists || st.Type != "" || st.Differs == "" {
			t.Fatalf("%+v, %v; want an existing queue of neither type, with the reasons", st, err)
		}
		t.Log(st.Differs)
	})
}

// TestQueuesFor: classic is the lab's contract unchanged; quorum adds the
// type and an explicit delivery limit, and to claim.in at-least-once
// dead-lettering with reject-publish.
func TestQueuesFor(t *testing.T) {
	if got := topo.QueuesFor(topo.Classic); !slices.EqualFunc(got, topo.Queues, func(a, b topo.QueueSpec) bool { return a.String() == b.String() }) {
		t.Errorf("classic: %v", got)
	}
	var got []string
	for _, s := range topo.QueuesFor(topo.Quorum) {
		got = append(got, s.String())
	}
	want := []string{
		"queue claim.dead (durable, x-queue-type=quorum, x-delivery-limit=2147483647)",
		"queue claim.in (durable, x-queue-type=quorum, x-dead-letter-exchange=eai.dlx, x-dead-letter-routing-key=claim.dead, x-dead-letter-strategy=at-least-once, x-overflow=reject-publish, x-delivery-limit=20)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("quorum:\n got %q\nwant %q", got, want)
	}
	if len(topo.Queues[1].Args) != 2 {
		t.Errorf("QueuesFor changed the classic contract: %v", topo.Queues[1].Args)
	}
}
