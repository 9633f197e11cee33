package topo_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/topo"
	"eaimq/internal/topo/topotest"
)

// TestOlderQuorumQueuesKept: a quorum claim.in and claim.dead declared
// without the delivery limit (an existing deployment) do not make topology
// fail with 406: they are kept as they are and named, InspectQueue knows
// them for quorum queues without the limit, and QueuesIn gives the
// consumer the specs they really have, so its redeclare of claim.in (the
// dead-letter check) passes too.
func TestOlderQuorumQueuesKept(t *testing.T) {
	vh := brokertest.New(t)
	topotest.DeclareOlderQuorum(t, vh)
	conn := vh.Dial(t)
	kept, err := topo.DeclareKept(conn, topo.Quorum)
	if err != nil {
		t.Fatalf("DeclareKept on the older queues: %v", err)
	}
	if want := []string{topo.DeadQueue, topo.Queue}; !slices.Equal(kept, want) {
		t.Errorf("kept %v, want %v", kept, want)
	}
	for _, name := range []string{topo.Queue, topo.DeadQueue} {
		st, err := topo.InspectQueue(conn, name)
		if err != nil || st.Type != topo.Quorum || !st.NoLimit {
			t.Errorf("%s: %+v, %v; want quorum without the limit", name, st, err)
		}
	}
	ch := vh.Channel(t)
	for _, s := range topo.QueuesIn(conn) {
		if _, ok := s.Args[topo.DeliveryLimitArg]; ok {
			t.Errorf("QueuesIn: %s with the limit, but the queue has none", s)
		}
		if err := topo.DeclareQueue(ch, s); err != nil {
			t.Fatalf("redeclare %s as QueuesIn gives it: %v", s, err)
		}
	}
	// A queue of the current contract is not "kept".
	vh2 := brokertest.New(t)
	if kept, err := topo.DeclareKept(vh2.Dial(t), topo.Quorum); err != nil || len(kept) != 0 {
		t.Errorf("fresh vhost: kept %v, %v", kept, err)
	}
	if kept, err := topo.DeclareKept(vh2.Dial(t), topo.Quorum); err != nil || len(kept) != 0 {
		t.Errorf("second declaration: kept %v, %v", kept, err)
	}
}

// TestOlderQueueOtherDifference: a 406 that is not only the missing limit
// stays the error it was.
func TestOlderQueueOtherDifference(t *testing.T) {
	vh := brokertest.New(t)
	ch := vh.Channel(t)
	if _, err := ch.QueueDeclare(topo.DeadQueue, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-max-length": int64(5)}); err != nil {
		t.Fatal(err)
	}
	if _, err := topo.DeclareKept(vh.Dial(t), topo.Quorum); err == nil {
		t.Fatal("a claim.dead with x-max-length was accepted")
	}
}

// returnTimes takes the one message of queue and gives it back (closes the
// channel it was taken on, as a consumer that dies does) until it is gone
// or n deliveries were seen; it returns how many deliveries there were.
func returnTimes(t *testing.T, vh *brokertest.VHost, queue string, n int) int {
	t.Helper()
	conn := vh.Dial(t)
	seen := 0
	for seen < n {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		var ok bool
		// A returned message is back at once, but a quorum queue applies the
		// return through its log: wait for it rather than take "empty" for
		// "dead-lettered".
		for wait := time.Now().Add(3 * time.Second); time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
			if _, ok, err = ch.Get(queue, false); err != nil {
				t.Fatal(err)
			} else if ok {
				break
			}
		}
		if !ok {
			return seen
		}
		seen++
		ch.Close() // unacked: the broker returns it, and counts the return
	}
	return seen
}

// TestDeliveryLimit, on whichever broker the tests run (3.x, or 4.x with
// EAIMQ_TEST_AMQP_URL): a claim returned to quorum claim.in DeliveryLimit
// times is dead-lettered by the broker to claim.dead at its next return,
// with x-death reason delivery_limit (a crash loop, not the partner's
// rejection); and a dead letter in quorum claim.dead survives far more
// returns than RabbitMQ 4's default limit of 20 (dlq returns each one it
// reads, and claim.dead has nowhere to dead-letter to: at a limit it would
// be dropped).
func TestDeliveryLimit(t *testing.T) {
	vh := brokertest.New(t)
	if err := topo.DeclareFor(vh.Dial(t), topo.Quorum); err != nil {
		t.Fatal(err)
	}
	vh.PublishClaims(t, brokertest.Claim("loop-1", "C-1", "receipt.pdf"))
	if got := returnTimes(t, vh, topo.Queue, topo.DeliveryLimit+5); got != topo.DeliveryLimit+1 {
		t.Errorf("claim.in delivered %d times, want %d (the limit, then dead-lettered)", got, topo.DeliveryLimit+1)
	}
	var dead amqp.Delivery
	brokertest.Eventually(t, 10*time.Second, "the claim in claim.dead", func() bool {
		d, ok, err := vh.Channel(t).Get(topo.DeadQueue, false)
		if err != nil {
			t.Fatal(err)
		}
		dead = d
		return ok
	})
	deaths, _ := dead.Headers["x-death"].([]any)
	if dead.MessageId != "loop-1" || len(deaths) == 0 {
		t.Fatalf("claim.dead: message %q, x-death %v", dead.MessageId, dead.Headers["x-death"])
	}
	death, _ := deaths[0].(amqp.Table)
	if death["reason"] != "delivery_limit" || death["queue"] != topo.Queue {
		t.Errorf("x-death %v: want reason delivery_limit from %s", death, topo.Queue)
	}
	t.Logf("x-death: %v", death)
	dead.Nack(false, true) // back into claim.dead: that is one return of many
	const looks = 30
	if got := returnTimes(t, vh, topo.DeadQueue, looks); got != looks {
		t.Errorf("claim.dead: the dead letter was gone after %d returns, want it there after %d", got, looks)
	}
	brokertest.Eventually(t, 10*time.Second, "claim.dead holding its dead letter, ready", func() bool {
		return vh.Queues(t)[topo.DeadQueue].Messages == 1
	})
}

// Example output of the declared limits, for the manual's table.
func ExampleQueuesFor() {
	for _, s := range topo.QueuesFor(topo.Quorum) {
		fmt.Println(s.Name, s.Args[topo.DeliveryLimitArg])
	}
	// Output:
	// claim.dead 2147483647
	// claim.in 20
}
