package relay

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/topo"
)

// TestAckerSettlesEachAsAsked: many workers settle the deliveries of one
// channel at once, in any order, through the acker: acks (coalesced into
// runs), requeues and rejects mixed. Afterwards the broker holds exactly
// what was asked: nothing unacked, the requeued ones back in claim.in, the
// rejected ones in claim.dead, and the channel never closed on an unknown
// delivery tag (a multiple ack past a delivery not settled would settle it
// wrongly, and a second ack of it would close the channel).
func TestAckerSettlesEachAsAsked(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	const n = 400
	var msgs []amqp.Publishing
	for i := range n {
		msgs = append(msgs, amqp.Publishing{MessageId: fmt.Sprintf("a-%03d", i), Body: []byte("{}")})
	}
	vh.Publish(t, msgs...)
	ch := vh.Channel(t)
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(50, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(topo.Queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := newAcker(ch, false)
	work := make(chan amqp.Delivery)
	var mu sync.Mutex
	var requeued, rejected, acked int
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				var err error
				switch r := rand.IntN(10); {
				case r == 0 && !d.Redelivered: // once: it comes back, and is settled for good then
					err = d.Nack(false, true)
					mu.Lock()
					requeued++
					mu.Unlock()
				case r == 1:
					err = d.Reject(false)
					mu.Lock()
					rejected++
					mu.Unlock()
				default:
					err = d.Ack(false)
					mu.Lock()
					acked++
					mu.Unlock()
				}
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return acked+rejected == n
	}
	for !done() {
		select {
		case d := <-ds:
			a.took(&d)
			work <- d
		case e := <-closed:
			t.Fatalf("the channel closed: %v", e)
		case <-time.After(100 * time.Millisecond):
		}
	}
	close(work)
	wg.Wait()
	select {
	case e := <-closed:
		t.Fatalf("the channel closed: %v", e)
	default:
	}
	if h := a.held.Load(); h != 0 {
		t.Errorf("the acker counts %d held, want 0", h)
	}
	q := vh.Queues(t)
	if q[topo.Queue].Messages != 0 || q[topo.Queue].Unacked != 0 || q[topo.DeadQueue].Messages != rejected {
		t.Errorf("claim.in %d ready %d unacked, claim.dead %d; want 0, 0, %d", q[topo.Queue].Messages, q[topo.Queue].Unacked, q[topo.DeadQueue].Messages, rejected)
	}
	if requeued == 0 || rejected == 0 {
		t.Errorf("requeued %d, rejected %d: the test did not mix them in", requeued, rejected)
	}
	t.Logf("%d acked, %d requeued (and settled later), %d rejected", acked, requeued, rejected)
}
