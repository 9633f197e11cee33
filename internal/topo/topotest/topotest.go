// Package topotest reads a test vhost's queues as an operator does, with
// rabbitmqctl, for the tests of topology and its migration.
package topotest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"eaimq/internal/brokertest"
	"eaimq/internal/topo"
)

// QueueRow is one queue of rabbitmqctl list_queues name type arguments,
// as an operator reads it.
type QueueRow struct {
	Name      string  `json:"name"`
	Type      string  `json:"type"`
	RawArgs   [][]any `json:"arguments"` // [name, AMQP type, value] each
	Messages  int     `json:"messages"`
	Arguments map[string]any
}

// ListQueues is the queues of vh by name.
func ListQueues(t *testing.T, vh *brokertest.VHost) map[string]QueueRow {
	t.Helper()
	out, err := vh.Ctl.Run(context.Background(), "-q", "list_queues", "-p", vh.Name, "name", "type", "arguments", "messages", "--formatter", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []QueueRow
	// Numbers as they are written (an x-delivery-limit of 2147483647 is
	// not 2.147483647e+09), so that they print as the contract's do.
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&rows); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	m := map[string]QueueRow{}
	for _, r := range rows {
		r.Arguments = map[string]any{}
		for _, a := range r.RawArgs {
			// RabbitMQ 4 lists a classic queue's type among its
			// arguments, which 3.x leaves out: the same queue.
			if len(a) == 3 && !(fmt.Sprint(a[0]) == "x-queue-type" && fmt.Sprint(a[2]) == string(topo.Classic)) {
				r.Arguments[fmt.Sprint(a[0])] = a[2]
			}
		}
		m[r.Name] = r
	}
	return m
}

// WantTypes fails the test unless the vhost holds exactly claim.in and
// claim.dead (and perhaps topology's archive, claim.dead.archive, which
// -migrate leaves as it is), of type kind, with the contract's arguments
// for it.
func WantTypes(t *testing.T, vh *brokertest.VHost, kind topo.QueueType) map[string]QueueRow {
	t.Helper()
	qs := ListQueues(t, vh)
	n := len(qs)
	if _, ok := qs[topo.ArchiveQueue]; ok {
		n--
	}
	if n != 2 {
		t.Errorf("want claim.in and claim.dead only, got %v", qs)
	}
	for _, s := range topo.QueuesFor(kind) {
		q, ok := qs[s.Name]
		if !ok {
			t.Errorf("%s missing", s.Name)
			continue
		}
		if q.Type != string(kind) {
			t.Errorf("%s is %s, want %s", s.Name, q.Type, kind)
		}
		got := fmt.Sprint(q.Arguments)
		if want := fmt.Sprint(map[string]any(s.Args)); got != want {
			t.Errorf("%s arguments %s, want %s", s.Name, got, want)
		}
	}
	return qs
}

// DeclareOlderQuorum declares the quorum topology in vh as eaimq did
// before it set delivery limits: the exchanges, claim.in and claim.dead
// without x-delivery-limit, and the bindings.
func DeclareOlderQuorum(t testing.TB, vh *brokertest.VHost) {
	t.Helper()
	ch := vh.Channel(t)
	defer ch.Close()
	for _, s := range topo.Exchanges {
		if err := topo.DeclareExchange(ch, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range topo.QueuesFor(topo.Quorum) {
		if err := topo.DeclareQueue(ch, topo.WithoutLimit(s)); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range topo.Bindings {
		if err := topo.DeclareBinding(ch, b); err != nil {
			t.Fatal(err)
		}
	}
}
