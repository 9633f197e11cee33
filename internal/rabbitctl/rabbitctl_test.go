package rabbitctl_test

import (
	"context"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/rabbitctl"
)

// TestListsReadAwkwardNames: a queue name with a tab and a space was
// split into the wrong columns of the tab-separated table and silently
// left out; the JSON lists it, with its counts. (The broker strips a
// newline from a queue name, so a tab is the awkward one left.)
func TestListsReadAwkwardNames(t *testing.T) {
	vh := brokertest.New(t)
	ch := vh.Channel(t)
	const awkward = "claim\tin x y"
	if _, err := ch.QueueDeclare(awkward, true /* durable */, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := ch.Publish("", awkward, false, false, amqp.Publishing{Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	// one of the three taken and not acked (publishes on one channel are
	// in order, so basic.get-ok means the three are queued)
	if _, ok, err := ch.Get(awkward, false /* autoAck */); err != nil || !ok {
		t.Fatalf("basic.get: %v %v", ok, err)
	}
	ctx := context.Background()
	var got rabbitctl.QueueRow
	// messages counts ready and unacked together
	brokertest.Eventually(t, 10*time.Second, "list_queues shows 3 messages, 1 unacked", func() bool {
		rows, err := vh.Ctl.ListQueues(ctx, vh.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Name == awkward {
				got = r
			}
		}
		return got.Messages == 3 && got.Unacked == 1
	})
	bs, err := vh.Ctl.ListBindings(ctx, vh.Name)
	if err != nil {
		t.Fatal(err)
	}
	want := rabbitctl.Binding{Source: "", Destination: awkward, DestinationKind: "queue", RoutingKey: awkward}
	if !slices.Contains(bs, want) {
		t.Errorf("list_bindings lacks the default exchange's binding to %q: %+v", awkward, bs)
	}
}

// TestListEmptyVhost: no queues is no rows and no error.
func TestListEmptyVhost(t *testing.T) {
	vh := brokertest.New(t)
	rows, err := vh.Ctl.ListQueues(context.Background(), vh.Name)
	if err != nil || len(rows) != 0 {
		t.Errorf("ListQueues on an empty vhost: %v, %v", rows, err)
	}
}
