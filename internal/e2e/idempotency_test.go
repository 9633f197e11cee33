package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimid"
	"eaimq/internal/claimsys"
	"eaimq/internal/partner"
	"eaimq/internal/topo"
)

// keyRecorder is the stand-in claim system, remembering the
// Idempotency-Key of every call, by the guid of the claim it carried.
type keyRecorder struct {
	next http.Handler
	mu   sync.Mutex
	keys map[string][]string // guid -> keys, in call order
}

func (k *keyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/claims" {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		guid, _ := claimid.Peek(body)
		k.mu.Lock()
		k.keys[guid] = append(k.keys[guid], r.Header.Get("Idempotency-Key"))
		k.mu.Unlock()
	}
	k.next.ServeHTTP(w, r)
}

func (k *keyRecorder) of(guid string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys[guid]...)
}

// draftWorld is a world whose claim system enforces the Idempotency-Key
// draft and records the keys it was sent.
func draftWorld(t *testing.T) (*world, *keyRecorder) {
	t.Helper()
	w := newWorld(t)
	on := true
	w.partner.Set(claimsys.Control{IdempotencyDraft: &on})
	rec := &keyRecorder{next: w.partner, keys: map[string][]string{}}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w, rec
}

// replayEdited takes every dead letter of claim.dead and publishes it
// again as dlq serve's edit and retry does (its body replaced by
// fix(guid), the broker's x-death headers dropped, x-eaimq-replays and the
// x-eaimq-edited table set), with the table's idempotency_key field when
// withKey(guid) (what dlq writes from now on: message_id+edit.<16 hex>)
// and without it otherwise (a dlq of before); it acks each dead letter
// once its copy is confirmed, and returns the keys it gave.
func (w *world) replayEdited(fix func(guid string) []byte, withKey func(guid string) bool) map[string]string {
	w.t.Helper()
	ch := w.vh.Channel(w.t)
	if err := ch.Confirm(false); err != nil {
		w.t.Fatal(err)
	}
	keys := map[string]string{}
	for {
		d, ok, err := ch.Get(topo.DeadQueue, false)
		if err != nil {
			w.t.Fatal(err)
		}
		if !ok {
			return keys
		}
		sum := sha256.Sum256(d.Body)
		edited := amqp.Table{"at": time.Now().UTC().Truncate(time.Second), "by": "dlq serve (test)", "previous_sha256": hex.EncodeToString(sum[:])}
		if withKey(d.MessageId) {
			keys[d.MessageId] = d.MessageId + "+edit." + hex.EncodeToString(sum[:8])
			edited[partner.EditedKey] = keys[d.MessageId]
		}
		dc, err := ch.PublishWithDeferredConfirm(topo.Exchange, topo.RoutingKey, true, false, amqp.Publishing{
			Headers: amqp.Table{"x-eaimq-replays": int64(1), partner.EditedHeader: edited}, ContentType: d.ContentType,
			DeliveryMode: amqp.Persistent, MessageId: d.MessageId, Body: fix(d.MessageId)})
		if err != nil || !dc.Wait() {
			w.t.Fatalf("publish the edited copy of %s: %v", d.MessageId, err)
		}
		if err := d.Ack(false); err != nil {
			w.t.Fatal(err)
		}
	}
}

// TestIdempotencyEditGetsANewKey: against a claim system that enforces
// the Idempotency-Key draft, a claim rejected (422, no documents) and
// fixed by an edit reaches the partner under the edit's own key
// (message_id+edit.<16 hex>, from the x-eaimq-edited header) and is
// accepted, once. The same fix sent under the old key (an edit without
// the field, as dlq made them before) is what the draft refuses, 422
// "key already used", and it goes back to claim.dead. Dedup keys on the
// message_id throughout.
func TestIdempotencyEditGetsANewKey(t *testing.T) {
	t.Parallel()
	w, rec := draftWorld(t)
	withKey, withoutKey := "edit-key-1", "edit-nokey-1"
	published := w.publishFiles(brokertest.Claim(withKey, "C-ek-1"), brokertest.Claim(withoutKey, "C-ek-2"))
	w.drainWith()
	if n := w.vh.Depth(t, topo.DeadQueue); n != 2 {
		t.Fatalf("claim.dead holds %d, want the two 422s", n)
	}
	keys := w.replayEdited(func(guid string) []byte { return brokertest.Claim(guid, "C-fixed", "receipt.pdf") },
		func(guid string) bool { return guid == withKey })
	w.drainWith()
	st := w.partner.Stats()
	if got := rec.of(withKey); len(got) != 2 || got[0] != withKey || got[1] != keys[withKey] {
		t.Errorf("%s: keys sent %q, want the message_id, then %q", withKey, got, keys[withKey])
	}
	if got := rec.of(withoutKey); len(got) != 2 || got[0] != withoutKey || got[1] != withoutKey {
		t.Errorf("%s: keys sent %q, want the message_id twice", withoutKey, got)
	}
	if st.Accepted[withKey] != 1 || st.Accepted[withoutKey] != 0 || st.Draft.Reused != 1 {
		t.Errorf("partner: accepted %v, draft %+v; want %s accepted once and one reused key refused", st.Accepted, st.Draft, withKey)
	}
	row := w.account("an edited claim replayed to a partner enforcing the Idempotency-Key draft", published, 0, "0",
		"the edit with its own key accepted; the edit under the old key refused 422 (key reused) and dead-lettered again")
	if row.lost != 0 {
		t.Error("a claim was lost")
	}
	t.Logf("keys: %v; partner draft counts %+v", rec.keys, st.Draft)
}

// TestIdempotency409Retried: a consumer dies while the partner, enforcing
// the draft, is still processing its call (held at the stand-in's gate).
// The copy comes back, and the next consumer's call with the same key is
// answered 409 (a request with this key is in progress): transient, so it
// waits in a delay queue (--retry-delays) instead of being dead-lettered.
// Once the first call is answered (201), the retry gets that answer again
// (the draft's replay) and is recorded as delivered: the partner processed
// the claim once, and nothing is in claim.dead.
func TestIdempotency409Retried(t *testing.T) {
	t.Parallel()
	const delays = "1s,3s"
	w, _ := draftWorld(t)
	if r := w.run("topology", "-retry-delays", delays); r.code != 0 {
		t.Fatalf("topology -retry-delays: %d %s", r.code, r.stderr)
	}
	zero := 0
	w.partner.Set(claimsys.Control{HoldAfter: &zero}) // the first call is held, "in progress"
	const guid = "conflict-1"
	published := w.publishFiles(brokertest.Claim(guid, "C-409", "receipt.pdf"))
	first := w.start("consumer", "--claim", w.url, "--max-seconds", "60")
	brokertest.Eventually(t, 30*time.Second, "the first call held at the partner", func() bool { return w.partner.Held() == 1 })
	first.kill()
	second := w.start("consumer", "--claim", w.url, "--max-seconds", "60", "--retry-delays", delays)
	brokertest.Eventually(t, 30*time.Second, "a 409 for the call in progress", func() bool {
		return w.partner.Stats().Draft.InProgress >= 1
	})
	w.partner.Release() // the first call is answered now: 201, as its caller is gone
	brokertest.Eventually(t, 30*time.Second, "the retry answered with the first call's 201", func() bool {
		q := w.vh.Queues(t)
		return w.partner.Stats().Draft.Replayed >= 1 && q[topo.Queue].Messages == 0 && q[topo.Queue].Unacked == 0 && w.delayed(delays) == 0
	})
	second.stop(t)
	st := w.partner.Stats()
	if st.Accepted[guid] != 1 || st.ByGuid[guid] != 1 {
		t.Errorf("partner: %d processed, %d accepted; want the claim processed once", st.ByGuid[guid], st.Accepted[guid])
	}
	w.account("a 409 (Idempotency-Key in progress) after a consumer died mid-call, --retry-delays "+delays, published, 0, "0",
		"409 retried from the delay queue, answered with the first call's 201: processed once, none dead-lettered")
	t.Logf("partner draft counts %+v; consumer: %s", st.Draft, second.out.String())
}
