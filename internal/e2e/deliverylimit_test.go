package e2e

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/topo"
	"eaimq/internal/topo/topotest"
)

// TestFaultCrashLoopDeliveryLimit: a claim on which the consumer dies,
// again and again (SIGKILLed while its call is held at the partner: a
// crash loop), on quorum queues as topology -queue-type quorum declares
// them. The broker counts each return, and at claim.in's explicit
// delivery limit (20, on 3.x as on 4.x) dead-letters the claim to
// claim.dead itself, with the x-death reason delivery_limit: the
// consumers stop dying on it. It is replayable: dlq replay puts it back,
// and a consumer delivers it. The held calls are answered 503 in the end
// (the claim was never processed), so the partner accepts it only from
// the replay.
func TestFaultCrashLoopDeliveryLimit(t *testing.T) {
	t.Parallel()
	w := quorumWorld(t)
	zero := 0
	w.partner.Set(claimsys.Control{HoldAfter: &zero}) // every call is held: the consumer dies holding the claim
	const guid = "crash-loop-1"
	published := w.publishFiles(brokertest.Claim(guid, "C-loop", "receipt.pdf"))
	kills := 0
	for w.vh.Depth(t, topo.DeadQueue) == 0 {
		if kills > topo.DeliveryLimit+2 {
			t.Fatalf("still not dead-lettered after %d kills (delivery limit %d)", kills, topo.DeliveryLimit)
		}
		p := w.start("consumer", "--claim", w.url, "--max-seconds", "60")
		held := kills + 1
		dead := false
		brokertest.Eventually(t, 30*time.Second, "the consumer's call held at the partner, or the claim dead-lettered", func() bool {
			dead = w.vh.Depth(t, topo.DeadQueue) == 1
			return w.partner.Held() == held || dead
		})
		p.kill()
		if dead {
			break
		}
		kills++
		brokertest.Eventually(t, 10*time.Second, "the claim returned to claim.in or dead-lettered", func() bool {
			return w.vh.Depth(t, topo.Queue) == 1 || w.vh.Depth(t, topo.DeadQueue) == 1
		})
	}
	if kills != topo.DeliveryLimit+1 {
		t.Errorf("dead-lettered after %d kills, want %d (the limit, then the return that passes it)", kills, topo.DeliveryLimit+1)
	}
	busy := 503
	w.partner.Set(claimsys.Control{ForceStatus: &busy})
	w.partner.Release()
	brokertest.Eventually(t, 10*time.Second, "the held calls answered", func() bool { return w.partner.Held() == 0 })

	ch := w.vh.Channel(t)
	d, ok, err := ch.Get(topo.DeadQueue, false)
	if err != nil || !ok {
		t.Fatalf("claim.dead: %v %v", ok, err)
	}
	deaths, _ := d.Headers["x-death"].([]any)
	death, _ := deaths[0].(amqp.Table)
	if d.MessageId != guid || death["reason"] != "delivery_limit" || death["queue"] != topo.Queue {
		t.Fatalf("claim.dead: %q with x-death %v; want %s, reason delivery_limit from claim.in", d.MessageId, d.Headers["x-death"], guid)
	}
	d.Nack(false, true)
	ch.Close()

	normal := 0
	w.partner.Set(claimsys.Control{ForceStatus: &normal})
	if r := w.run("dlq", "replay", guid); r.code != 0 || !strings.Contains(r.stdout+r.stderr, "replayed") {
		t.Fatalf("dlq replay %s: exit %d\n%s%s", guid, r.code, r.stdout, r.stderr)
	}
	w.drainWith()
	if st := w.partner.Stats(); st.Accepted[guid] != 1 {
		t.Errorf("after the replay: accepted %d times, want once", st.Accepted[guid])
	}
	w.account("a crash loop: the consumer SIGKILLed 21 times holding one claim, quorum claim.in", published, 0, "0",
		"dead-lettered by the broker at the 21st return (x-delivery-limit 20, x-death reason delivery_limit), then replayed with dlq and delivered once")
}

// quorumWorld is a world whose claim.in and claim.dead are quorum queues.
func quorumWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, vh: brokertest.New(t), db: t.TempDir() + "/processed.db", bin: installed(t)}
	w.partner = claimsys.New()
	w.url = newPartnerServer(t, w.partner)
	t.Cleanup(w.partner.Release) // first: the server's Close waits for held calls
	if r := w.run("topology", "-queue-type", "quorum"); r.code != 0 {
		t.Fatalf("topology -queue-type quorum: %d %s", r.code, r.stderr)
	}
	return w
}

// TestDLQBrowsingQuorumDead: dlq list returns every dead letter it reads,
// and a quorum queue counts each return. On claim.dead as topology
// declares it (x-delivery-limit 2147483647) a dead letter survives 25
// lists on any version. On a claim.dead declared without the limit (an
// older eaimq), RabbitMQ 4's default limit of 20 drops it (claim.dead has
// no dead-letter exchange) at the 21st list, which 3.x, with no default
// limit, does not: the broker truly differs there, and the test says
// which it is.
func TestDLQBrowsingQuorumDead(t *testing.T) {
	t.Parallel()
	for _, older := range []bool{false, true} {
		w := quorumWorld(t)
		if older {
			w = olderQuorumWorld(t)
		}
		published := w.publishFiles(brokertest.Claim("browsed-1", "C-br")) // no documents: 422
		w.drainWith()
		lists := 0
		for ; lists < 25 && w.deadLetterBack(); lists++ {
			if r := w.run("dlq", "list"); r.code != 0 || !strings.Contains(r.stdout, "browsed-1") {
				t.Fatalf("dlq list %d: exit %d\n%s%s", lists+1, r.code, r.stdout, r.stderr)
			}
		}
		v, _ := w.vh.Dial(t).Properties["version"].(string)
		switch {
		case !older && lists != 25:
			t.Errorf("claim.dead with its limit, RabbitMQ %s: the dead letter was gone after %d lists", v, lists)
		case older && strings.HasPrefix(v, "3.") && lists != 25:
			t.Errorf("claim.dead without a limit, RabbitMQ %s: gone after %d lists; 3.x has no default limit", v, lists)
		case older && !strings.HasPrefix(v, "3.") && lists != 21:
			t.Errorf("claim.dead without a limit, RabbitMQ %s: %d lists, want the dead letter dropped at the 21st (4.x's default limit of 20)", v, lists)
		}
		t.Logf("RabbitMQ %s, claim.dead %s: the dead letter is %s after %d dlq list(s)", v,
			map[bool]string{false: "with x-delivery-limit", true: "without x-delivery-limit (older)"}[older],
			map[bool]string{false: "gone", true: "still there"}[w.deadLetterBack()], lists)
		if !older {
			w.account("dlq list 25 times on quorum claim.dead", published, 0, "0", "the dead letter kept: claim.dead's x-delivery-limit is 2147483647")
		}
	}
}

// olderQuorumWorld is quorumWorld with claim.in and claim.dead as an
// older eaimq declared them, without x-delivery-limit.
func olderQuorumWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, vh: brokertest.New(t), db: t.TempDir() + "/processed.db", bin: installed(t)}
	w.partner = claimsys.New()
	w.url = newPartnerServer(t, w.partner)
	topotest.DeclareOlderQuorum(t, w.vh)
	if r := w.run("topology", "-queue-type", "quorum"); r.code != 0 || !strings.Contains(r.stderr, "warning") {
		t.Fatalf("topology -queue-type quorum over the older queues: %d %s", r.code, r.stderr)
	}
	return w
}

// deadLetterBack says whether claim.dead holds its one dead letter, ready:
// a quorum queue takes back a message returned by a closed channel a
// moment later, so "not there" is only believed after 3 s.
func (w *world) deadLetterBack() bool {
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if w.vh.Depth(w.t, topo.DeadQueue) == 1 {
			return true
		}
	}
	return false
}
