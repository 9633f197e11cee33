package broker_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
)

// TestCloseUnderAFrozenPublish: a node freezes mid-publish (it reads
// nothing more and sends nothing more, not even heartbeats). The Publish
// blocks in its write; after three missed heartbeats the library starts
// its own shutdown, which marks the connection closed and then waits for
// the channel the blocked Publish holds. Close must still end it: the
// blocked Publish returns and Close returns within its two seconds. Before
// Abort set the socket's deadline, Close saw a closed connection and did
// nothing, and the Publish (and whatever waited for it: the consumer's
// delayed copies, a replay, publish) hung forever.
func TestCloseUnderAFrozenPublish(t *testing.T) {
	vh := brokertest.New(t)
	url, frozen := brokertest.FreezeOnPublish(t, vh.URL)
	ctx := context.Background()
	conn, err := broker.Dialer{Program: "test", Timeout: 5 * time.Second}.Dial(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() {
		body := make([]byte, 1<<20)
		for {
			// The socket's buffers fill within a few of these, then the
			// write blocks.
			if err := ch.PublishWithContext(ctx, "", "nowhere", false, false, amqp.Publishing{Body: body}); err != nil {
				published <- err
				return
			}
		}
	}()
	select {
	case <-frozen:
	case <-time.After(30 * time.Second):
		t.Fatal("the proxy never froze: no publish reached it")
	}
	// The gate: the library's shutdown has begun (three heartbeats of 5 s
	// missed). It marks the connection closed first, then waits.
	deadline := time.Now().Add(45 * time.Second)
	for !conn.IsClosed() {
		if time.Now().After(deadline) {
			t.Fatal("the library never began its shutdown: the fault did not happen")
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case err := <-published:
		t.Fatalf("the publish returned (%v) before Close: it was never blocked", err)
	default:
	}
	closed := make(chan struct{})
	start := time.Now()
	go func() {
		broker.Close(conn)
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting 10 s after it was called")
	}
	select {
	case err := <-published:
		if err == nil {
			t.Fatal("the blocked publish succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the publish is still blocked 10 s after Close")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close and the publish took %s; the grace is 2 s", took)
	}
}
