package relay

import (
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

// depthEvery is how often a session asks the broker how many messages
// claim.in, claim.dead and the delay queues hold (--metrics-addr): a
// passive declare each, on a channel of its own. The broker answers from
// the queue's counters, so this is cheap for it at any depth; Prometheus
// scrapes every 15 s or so, and a few seconds' staleness is nothing to a
// backlog alert.
const depthEvery = 5 * time.Second

// depthQueues are the queues whose depth the metrics show: claim.in,
// claim.dead, and each delay queue of --retry-delays. A claim waiting for
// its retry is in no other queue: without its delay queue's depth, claims
// held there through a partner's outage are in no panel and no alert, and
// "none lost" cannot be read off the dashboard.
func (r *relay) depthQueues() []string {
	qs := []string{topo.Queue, topo.DeadQueue}
	if r.cfg.Retry != nil {
		for _, d := range r.cfg.Retry.Queues() {
			qs = append(qs, retry.QueueName(d))
		}
	}
	return qs
}

// sessionWatch is what one session reports to the metrics besides the
// claims and the deliveries held unacked (acker.go): the queues' depth,
// polled. A nil *sessionWatch (no --metrics-addr) does nothing.
type sessionWatch struct {
	r      *relay
	queues []string      // depthQueues
	done   chan struct{} // closed at the session's end: the poll stops

	mu    sync.Mutex // over the depths' update and ended
	ended bool
}

// watchSession starts the watch of the session consuming on conn. end
// stops it: the depths are unknown until the next session polls. It does
// not wait for a passive declare in progress (a broker that stalls must
// not hold up the session's end): the poll sees ended and updates nothing
// more.
func (r *relay) watchSession(conn *amqp.Connection) *sessionWatch {
	if r.metrics == nil {
		return nil
	}
	w := &sessionWatch{r: r, queues: r.depthQueues(), done: make(chan struct{})}
	go w.poll(conn)
	return w
}

func (w *sessionWatch) end() {
	if w == nil {
		return
	}
	close(w.done)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	for _, q := range w.queues {
		w.r.metrics.QueueUnknown(q)
	}
}

// unacked is the current session's deliveries held unacked (0 between
// sessions: the broker has them back).
func (r *relay) unacked() int64 {
	if a := r.acks.Load(); a != nil {
		return a.held.Load()
	}
	return 0
}

// poll asks for the queues' depth at once and then every depthEvery until
// the session ends. A passive declare of a queue that is gone closes its
// channel (404): that queue's depth is unknown, and the next poll opens
// another channel.
func (w *sessionWatch) poll(conn *amqp.Connection) {
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			ch.Close()
		}
	}()
	tick := time.NewTicker(depthEvery)
	defer tick.Stop()
	for {
		if ch == nil {
			ch, _ = conn.Channel() // nil on a closing connection: the session ends soon
		}
		for _, q := range w.queues {
			n := -1 // unknown
			if ch != nil {
				st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
				if err != nil {
					ch.Close() // closed already by the broker's 404, or of no use
					ch = nil
				} else {
					n = st.Messages
				}
			}
			w.depth(q, n)
		}
		select {
		case <-w.done:
			return
		case <-tick.C:
		}
	}
}

// depth shows queue's depth n (-1: unknown), unless the session ended.
func (w *sessionWatch) depth(queue string, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.ended:
	case n < 0:
		w.r.metrics.QueueUnknown(queue)
	default:
		w.r.metrics.QueueReady(queue, n)
	}
}
