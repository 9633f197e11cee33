package relay

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/topo"
)

// A node cut off from its cluster's majority may stay up and keep its
// clients' connections open: RabbitMQ 4 with the Khepri metadata store
// has no pause_minority, and a node under "ignore" does not pause either
// (docs/fault-suite.md#network-partitions). A consumer on it then gets no
// delivery for as long as the partition lasts, its acks go nowhere (the
// quorum queue's leader, on the majority side, has returned its claims to
// the others once it saw the node go), and nothing from the broker says
// so: the connection's heartbeats go on, and a passive declare of
// claim.in answers from the node's own stale copy. --stall-after watches
// for that: with a prefetch slot free, no delivery for the whole period
// while claim.in says it holds ready claims. A healthy node delivers a
// ready claim to a consumer with credit within milliseconds, so the
// session is given up (its connection closed) and the consumer connects
// to the next address of EAI_AMQP_URL.
//
// When the others have drained claim.in, its depth says nothing, yet the
// cut-off node is of no use, and what its consumer acks goes nowhere. A
// declaration does tell: with Khepri a queue's creation is a write to the
// metadata store, which a node without the majority cannot make (it
// blocks: rabbitmq.com/docs/metadata-store/failure-recovery). So while
// claim.in shows no ready claim, the watch also declares a server-named
// exclusive queue and deletes it; a node that answers neither the
// passive declare nor that within half the period is given up too. The
// same bound covers a node that stalled outright.

// errStalled ends a session that --stall-after found stalled; the error
// the session ends with wraps it and says which sign it was.
var errStalled = errors.New("session stalled")

var (
	errReadyNotDelivered = fmt.Errorf("%w: no delivery with a prefetch slot free while claim.in holds ready claims: the node seems cut off from the queue's leader", errStalled)
	errNoAnswer          = fmt.Errorf("%w: no delivery with a prefetch slot free, and the node did not answer a queue declaration within the period: it seems cut off from its cluster's majority (its metadata store cannot write) or stalled", errStalled)
)

// stallWatch is one session's watch. lastDelivery is the session loop's
// (UnixNano of the last delivery or of the session's start); held is the
// session's acker count.
type stallWatch struct {
	after        time.Duration
	prefetch     int64
	lastDelivery atomic.Int64
	holding      atomic.Bool // consuming is held back (the store is down): no delivery is expected
	stalled      chan struct{}
	why          error // set before stalled is closed
	done         chan struct{}
}

// watchStall starts the watch of the session on conn; a nil watch (the
// flag off) never fires. end stops it.
func (r *relay) watchStall(conn *amqp.Connection, acks *acker) *stallWatch {
	if r.cfg.StallAfter <= 0 {
		return nil
	}
	w := &stallWatch{after: r.cfg.StallAfter, prefetch: int64(r.cfg.Prefetch),
		stalled: make(chan struct{}), done: make(chan struct{})}
	w.delivered()
	go w.poll(conn, acks)
	return w
}

func (w *stallWatch) delivered() {
	if w != nil {
		w.lastDelivery.Store(time.Now().UnixNano())
	}
}

func (w *stallWatch) hold(on bool) {
	if w != nil {
		w.holding.Store(on)
		w.delivered() // the period starts again when consuming does
	}
}

// fired is closed when the session is found stalled (nil: never).
func (w *stallWatch) fired() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.stalled
}

func (w *stallWatch) end() {
	if w != nil {
		close(w.done)
	}
}

// stallTick is how often the watch looks: a quarter of the period, at
// least a second (a passive declare each time the other conditions hold).
func stallTick(after time.Duration) time.Duration { return max(after/4, time.Second) }

// probeWait is how long the watch waits for the node's answer: half the
// period, at least a second. A healthy node makes a queue in
// milliseconds; a Khepri minority never does.
func probeWait(after time.Duration) time.Duration { return max(after/2, time.Second) }

// poll checks every stallTick. It asks the broker (on a channel of its
// own) only when the local conditions hold, so a busy consumer costs the
// broker nothing, and it waits for the answer at most the period.
func (w *stallWatch) poll(conn *amqp.Connection, acks *acker) {
	tick := time.NewTicker(stallTick(w.after))
	defer tick.Stop()
	// The probe's channel is not closed here: a probe may still wait on
	// it, and the session's end closes the connection, and it with it.
	p := &prober{conn: conn}
	for {
		select {
		case <-w.done:
			return
		case <-tick.C:
		}
		quiet := time.Since(time.Unix(0, w.lastDelivery.Load()))
		if w.holding.Load() || quiet < w.after || acks.held.Load() >= w.prefetch {
			continue
		}
		// The probe runs beside the watch: an RPC the node never answers
		// returns only when the connection closes, which firing does.
		answer := make(chan error, 1)
		go func() { answer <- p.probe() }()
		wait := time.NewTimer(probeWait(w.after))
		var why error
		select {
		case <-w.done:
			wait.Stop()
			return
		case err := <-answer:
			wait.Stop()
			if errors.Is(err, errClosing) {
				return // the session ends anyway
			}
			why = err
		case <-wait.C:
			why = errNoAnswer
		}
		if why != nil {
			w.why = why
			close(w.stalled)
			return
		}
	}
}

// errClosing: the probe found the connection closing.
var errClosing = errors.New("connection closing")

// prober asks the node the watch's questions, on a channel of its own
// that it keeps between probes. One probe runs at a time.
type prober struct {
	conn *amqp.Connection
	ch   *amqp.Channel
}

// probe returns errReadyNotDelivered when claim.in holds ready claims,
// nil when the node made a queue and deleted it, and errClosing when the
// connection is going; an error of the channel alone is no sign (the
// next probe opens another).
func (p *prober) probe() error {
	if p.ch == nil {
		ch, err := p.conn.Channel()
		if err != nil {
			return errClosing
		}
		p.ch = ch
	}
	q, err := p.ch.QueueDeclarePassive(topo.Queue, true, false, false, false, nil)
	if err == nil && q.Messages > 0 {
		return errReadyNotDelivered
	}
	if err == nil {
		// Server-named, exclusive: no name to clash with, and gone with
		// the connection if the delete does not come.
		var made amqp.Queue
		if made, err = p.ch.QueueDeclare("", false, true, true, false, nil); err == nil {
			_, err = p.ch.QueueDelete(made.Name, false, false, false)
		}
	}
	if err != nil {
		p.close() // closed by the broker already, or of no use
		if p.conn.IsClosed() {
			return errClosing
		}
	}
	return nil
}

func (p *prober) close() {
	if p.ch != nil {
		p.ch.Close()
		p.ch = nil
	}
}

// dialURL is the address list the next dial takes: cfg.URL, reordered
// by each stall. The delayed copies' sender dials it from its own
// goroutine, hence the lock.
func (r *relay) dialURL() string {
	r.urlMu.Lock()
	defer r.urlMu.Unlock()
	if r.url == "" {
		return r.cfg.URL
	}
	return r.url
}

func (r *relay) setURL(u string) {
	r.urlMu.Lock()
	defer r.urlMu.Unlock()
	r.url = u
}

// nextFirst is the address list raw rotated so that the address after the
// one the stalled connection went to (remote) comes first, and that one
// last: dialled in order again, the list would take the consumer back to
// the node it gave up on. An address is matched by host and port (5672,
// or 5671 for amqps, when the URL has none); when none matches (a host
// name the dial resolved), the list is rotated by one. One address is
// returned as it is.
func nextFirst(raw string, remote net.Addr) string {
	addrs := broker.Addresses(raw)
	if len(addrs) < 2 {
		return raw
	}
	at := 0
	if remote != nil {
		for i, a := range addrs {
			if sameHostPort(a, remote.String()) {
				at = i
				break
			}
		}
	}
	rotated := append(append([]string{}, addrs[at+1:]...), addrs[:at+1]...)
	return strings.Join(rotated, ",")
}

func sameHostPort(addr, remote string) bool {
	u, err := url.Parse(addr)
	if err != nil {
		return false
	}
	port := u.Port()
	if port == "" {
		port = "5672"
		if strings.EqualFold(u.Scheme, "amqps") {
			port = "5671"
		}
	}
	return net.JoinHostPort(u.Hostname(), port) == remote
}
