package main

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/topo"
)

// TestRetryDelays: -retry-delays declares one delay queue per distinct
// delay, of -queue-type, idempotently; -check verifies them; and a claim
// left in one comes back to claim.in when its delay has passed, classic
// and quorum alike.
func TestRetryDelays(t *testing.T) {
	for _, kind := range []string{"classic", "quorum"} {
		t.Run(kind, func(t *testing.T) {
			vh := brokertest.New(t)
			for range 2 {
				code, out, stderr := runTopology(t, vh, "-queue-type", kind, "-retry-delays", "1s,1m,1s")
				if code != 0 || !strings.Contains(out, "declared 2 delay queue(s) for consumer --retry-delays 1s,1m,1s: claim.retry.1s, claim.retry.1m") {
					t.Fatalf("exit %d:\n%s%s", code, out, stderr)
				}
			}
			if code, out, stderr := runTopology(t, vh, "-check", "-queue-type", kind, "-retry-delays", "1s,1m"); code != 0 ||
				!strings.Contains(out, "ok      queue claim.retry.1m (durable, ") || !strings.Contains(out, "x-message-ttl=60000") {
				t.Errorf("-check: exit %d:\n%s%s", code, out, stderr)
			}
			if code, out, _ := runTopology(t, vh, "-check", "-queue-type", kind, "-retry-delays", "5s"); code != 78 ||
				!strings.Contains(out, "PROBLEM queue claim.retry.5s") {
				t.Errorf("-check of a missing delay queue: exit %d:\n%s", code, out)
			}
			ch := vh.Channel(t)
			start := time.Now()
			if err := ch.Publish("", "claim.retry.1s", false, false, amqp.Publishing{MessageId: "back-1", DeliveryMode: amqp.Persistent, Body: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			brokertest.Eventually(t, 20*time.Second, "the claim back in claim.in", func() bool {
				return vh.Depth(t, topo.Queue) == 1
			})
			if waited := time.Since(start); waited < time.Second {
				t.Errorf("back after %s, before its 1s delay", waited)
			}
		})
	}
}

// TestRetryDelaysUsage: a bad list is a usage error, before any connection.
func TestRetryDelaysUsage(t *testing.T) {
	vh := brokertest.New(t)
	if code, _, stderr := runTopology(t, vh, "-retry-delays", "100ms"); code != 2 || !strings.Contains(stderr, "whole seconds from 1s to 24h") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	if code, _, stderr := runTopology(t, vh, "-migrate", "quorum", "-retry-delays", "1s"); code != 2 {
		t.Errorf("-migrate with -retry-delays: exit %d: %s", code, stderr)
	}
}

// TestRetryQueueThatDiffers: a delay queue that exists with other
// arguments (another delay's TTL, say) is the 406 explained, exit 78, not
// a crash.
func TestRetryQueueThatDiffers(t *testing.T) {
	vh := brokertest.New(t)
	ch := vh.Channel(t)
	if _, err := ch.QueueDeclare("claim.retry.5s", true, false, false, false, amqp.Table{"x-message-ttl": int32(1000)}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runTopology(t, vh, "-retry-delays", "5s")
	if code != 78 || !strings.Contains(stderr, "queue claim.retry.5s already exists") || !strings.Contains(stderr, "remedy:") {
		t.Errorf("exit %d, want 78 with the remedy:\n%s%s", code, out, stderr)
	}
}
