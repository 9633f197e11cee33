package dlq

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/topo"
)

// TestSourceCountsWhatIsOnItsWay: a message the broker has sent the walk's
// consumer, and dlq has not received yet, is not ready either, so a
// passive declare counts none while the walk still has one coming. With
// the idle check at a microsecond, the count is asked before the
// deliveries arrive; the walk must still take every message, on a classic
// and a quorum claim.dead.
func TestSourceCountsWhatIsOnItsWay(t *testing.T) {
	for _, qt := range []topo.QueueType{topo.Classic, topo.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			vh := brokertest.New(t)
			conn := vh.Dial(t)
			if err := topo.DeclareFor(conn, qt); err != nil {
				t.Fatal(err)
			}
			const n = 50
			msgs := make([]amqp.Publishing, n)
			for i := range msgs {
				id := fmt.Sprintf("way-%d", i)
				msgs[i] = amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, Body: brokertest.Claim(id, "C-"+id)}
			}
			vh.DeadLetter(t, msgs...)
			for round := 0; round < 5; round++ {
				ch, err := conn.Channel()
				if err != nil {
					t.Fatal(err)
				}
				src := &source{ch: ch, queue: topo.DeadQueue, idle: time.Microsecond}
				seen := map[string]bool{}
				for len(seen) < n {
					batch, err := src.next(context.Background(), n)
					if err != nil {
						t.Fatal(err)
					}
					if len(batch) == 0 {
						break
					}
					for _, d := range batch {
						seen[d.MessageId] = true
					}
				}
				ch.Close()
				if len(seen) != n {
					t.Fatalf("round %d: the walk ended after %d of %d dead letters", round, len(seen), n)
				}
			}
		})
	}
}
