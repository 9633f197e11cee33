package dlq

import (
	"bytes"
	"context"
	"fmt"
	"strings"
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
			const n = 50
			_, conn := withDeadLetters(t, qt, "way", n)
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

// TestCloseGivesBackBeforeItReturns: once a Browser's Close returns, every
// dead letter its walk held is ready in claim.dead again, on both queue
// types, so that the next command (a dlq show right after a dlq list) sees
// them all; the one it moved (acked) is not waited for.
func TestCloseGivesBackBeforeItReturns(t *testing.T) {
	for _, qt := range []topo.QueueType{topo.Classic, topo.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			const n = 2000
			vh, conn := withDeadLetters(t, qt, "back", n)
			b, err := NewBrowser(conn, nil)
			if err != nil {
				t.Fatal(err)
			}
			looked := 0
			if err := b.walk(context.Background(), 0, func(m *dead) (bool, error) {
				looked++
				if looked == 1 {
					return true, m.d.Ack(false) // moved: not given back
				}
				return true, nil
			}); err != nil || looked != n {
				t.Fatalf("walk: %d of %d, %v", looked, n, err)
			}
			if got := b.held.outstanding(); got != n-1 {
				t.Fatalf("%d held after the walk, want %d: Close would wait for the wrong count", got, n-1)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if got := vh.Depth(t, topo.DeadQueue); got != n-1 {
				t.Errorf("claim.dead counts %d ready after Close, want %d", got, n-1)
			}
		})
	}
}

// withDeadLetters is a vhost whose topology has queues of type qt, with n
// dead letters in claim.dead (message_id and guid prefix-0, prefix-1, ...),
// and a connection to it.
func withDeadLetters(t *testing.T, qt topo.QueueType, prefix string, n int) (*brokertest.VHost, *amqp.Connection) {
	t.Helper()
	vh := brokertest.New(t)
	conn := vh.Dial(t)
	if err := topo.DeclareFor(conn, qt); err != nil {
		t.Fatal(err)
	}
	msgs := make([]amqp.Publishing, n)
	for i := range msgs {
		id := fmt.Sprintf("%s-%d", prefix, i)
		msgs[i] = amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, Body: brokertest.Claim(id, "C-"+id)}
	}
	vh.DeadLetter(t, msgs...)
	return vh, conn
}

// TestWalkStopsAtMaxHeld: a walk never has the broker hold more than
// MaxHeld dead letters for it, says so when it stops there (how many it
// looked at, how many are beyond), and is not stopped by the ones it
// settled: a replay that acks what it moved walks the whole queue.
func TestWalkStopsAtMaxHeld(t *testing.T) {
	for _, qt := range []topo.QueueType{topo.Classic, topo.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			const n, bound = 300, 120
			vh, conn := withDeadLetters(t, qt, "bound", n)
			b, err := NewBrowser(conn, nil)
			if err != nil {
				t.Fatal(err)
			}
			b.MaxHeld = bound
			looked, peak := 0, 0
			if err := b.walk(context.Background(), 0, func(m *dead) (bool, error) {
				looked++
				peak = max(peak, b.held.outstanding())
				return true, nil
			}); err != nil {
				t.Fatal(err)
			}
			if looked != bound || peak > bound || b.unlooked() != n-bound {
				t.Fatalf("looked at %d (held at most %d), %d beyond; want %d, at most %d, %d", looked, peak, b.unlooked(), bound, bound, n-bound)
			}
			// A quorum queue's counts reach list_queues a stats interval
			// late; the walk holds its dead letters until Close meanwhile.
			brokertest.Eventually(t, 15*time.Second, fmt.Sprintf("the broker holding %d unacked for the walk", bound), func() bool {
				return vh.Queues(t)[topo.DeadQueue].Unacked == bound
			})
			var note bytes.Buffer
			b.BoundNote(&note)
			want := fmt.Sprintf("dlq: stopped at -max-held %d: looked at %d dead letter(s), %d more in claim.dead beyond; ", bound, bound, n-bound)
			if !strings.HasPrefix(note.String(), want) || strings.Count(note.String(), "\n") != 1 {
				t.Errorf("the note:\n%q\nwant one line beginning\n%q", note.String(), want)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}

			// Settling what it looks at makes room: every one is looked at.
			b, err = NewBrowser(conn, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			b.MaxHeld = bound
			looked = 0
			if err := b.walk(context.Background(), 0, func(m *dead) (bool, error) {
				looked++
				return true, m.d.Ack(false)
			}); err != nil || looked != n || b.bounded {
				t.Fatalf("a walk that acks: looked at %d of %d (stopped at the bound: %v), %v", looked, n, b.bounded, err)
			}
			note.Reset()
			if b.BoundNote(&note); note.Len() != 0 {
				t.Errorf("a walk that did not stop at the bound says %q", note.String())
			}
		})
	}
}
