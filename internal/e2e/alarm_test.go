package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

// TestFaultDelayedCopyUnderMemoryAlarm: a memory alarm on a private node blocks
// every connection that publishes, and reads nothing more from it, acks
// included. A consumer with --retry-delays sends its delayed copies on a
// connection of their own, so a copy sent during the alarm waits, its
// claim held, while the other claims are called and acked on the
// consuming connection; once the alarm clears the copy goes out and the
// claim goes on to its retry. (With the copies on the consuming
// connection, the first copy held every ack until the alarm cleared.)
// Serial: a private node on a fixed port, and its memory alarm.
func TestFaultDelayedCopyUnderMemoryAlarm(t *testing.T) {
	node, port := "eaimqretryalarm@localhost", 5693
	brokertest.PrivateNode(t, node, port)
	w, ctl := onNode(t, node, port)
	w.url = newPartnerServer(t, w.partner)
	if r := w.run("topology", "-retry-delays", "1s"); r.code != 0 {
		t.Fatalf("topology: %s", r.stderr)
	}
	// The BUSY claim first: its copy is the first publish of the run.
	claims := append([][]byte{brokertest.Claim("alarm-busy", "BUSY-alarm", "r.pdf")}, brokertest.Claims("alarm", "C-al", 20, true)...)
	published := w.publishFiles(claims...)

	alarm := func() bool {
		out, _ := ctl.Run(context.Background(), "-q", "eval", "rabbit_alarm:get_alarms().")
		return strings.Contains(string(out), "memory")
	}
	if _, err := ctl.Run(context.Background(), "-q", "set_vm_memory_high_watermark", "absolute", "1MiB"); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 15*time.Second, "memory alarm on", alarm)
	p := w.start("consumer", "--claim", w.url, "--max-seconds", "180", "--retry-delays", "1s")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("queues %+v; accepted %d; calls %v\nconsumer's stderr:\n%s", w.vh.Queues(t), len(w.partner.Stats().Accepted), w.partner.Stats().ByGuid["alarm-busy"], p.errb.String())
		}
	})

	// The fault has happened when the consumer heard connection.blocked:
	// its copy was sent during the alarm. The other 20 are delivered and
	// acked all the same, and the BUSY claim is held, called once.
	brokertest.Eventually(t, 60*time.Second, "the good claims acked during the alarm", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		q := w.vh.Queues(t)[topo.Queue]
		return strings.Contains(p.errb.String(), "the broker blocks publishing") &&
			len(w.partner.Stats().Accepted) == 20 && q.Messages == 1 && q.Unacked == 1 // messages counts the unacked too
	})
	if !alarm() {
		t.Fatal("the memory alarm cleared by itself: the test proves nothing")
	}
	if n := w.partner.Stats().ByGuid["alarm-busy"]; n != 1 {
		t.Errorf("the BUSY claim was called %d times during the alarm, want 1 (its copy waits)", n)
	}
	if n := w.vh.Depth(t, retry.QueueName(time.Second)); n != 0 {
		t.Errorf("claim.retry.1s holds %d during the alarm, want 0", n)
	}

	if _, err := ctl.Run(context.Background(), "-q", "set_vm_memory_high_watermark", "0.4"); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 60*time.Second, "the BUSY claim retried and dead-lettered after the alarm", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		q := w.vh.Queues(t)
		return q[topo.Queue].Messages == 0 && q[topo.Queue].Unacked == 0 && q[topo.DeadQueue].Messages == 1
	})
	p.stop(t)
	if n := w.partner.Stats().ByGuid["alarm-busy"]; n != 2 {
		t.Errorf("the BUSY claim was called %d times, want 2: before its delay and after", n)
	}
	w.account("memory alarm with --retry-delays 1s: a delayed copy sent during it", published, 0, "0",
		"20 delivered and acked during the alarm; the BUSY claim's copy waited for it, then one retry, then the DLQ")
}
