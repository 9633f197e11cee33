package publish

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/confirm"
	"eaimq/internal/fail"
	"eaimq/internal/topo"
)

// dialed is a connection with its confirming publisher, or why there is none.
type dialed struct {
	conn    *amqp.Connection
	p       *confirm.Publisher
	blocked chan amqp.Blocking
	closed  chan *amqp.Error // the publishing channel's close, as the broker gave it
	err     error
}

// closeReason is the broker's reason for closing the publishing channel,
// or nil when it has not. A publish after the close fails with "channel
// not open" (504); this is the 406 that closed it.
func (d *dialed) closeReason() error {
	select {
	case e, ok := <-d.closed:
		if ok && e != nil {
			return e
		}
	default:
	}
	return nil
}

// blockedReason says why the broker blocks this connection, if it does.
// The library closes the channel when the connection has shut down: what
// came before the close is the answer (a closed channel would otherwise
// answer at once, forever).
func (d *dialed) blockedReason() string {
	why := ""
	for {
		select {
		case b, ok := <-d.blocked:
			if !ok {
				return why
			}
			why = ""
			if b.Active {
				why = b.Reason
			}
			continue
		default:
		}
		return why
	}
}

// dialing is a connection being made in the background.
type dialing struct {
	ctx  context.Context
	done chan struct{} // closed when d is set
	d    dialed
}

// dialAsync starts connecting (and checking the exchange) at once; a
// signal (ctx) ends the attempt.
func dialAsync(ctx context.Context, dialer broker.Dialer, url string, window int, timeout time.Duration) *dialing {
	g := &dialing{ctx: ctx, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		conn, err := dialer.Dial(ctx, url)
		if err != nil {
			g.d = dialed{err: fail.New(fail.Unavailable, err)}
			return
		}
		// The handshake is bounded by the dial; the three round trips that
		// follow (channel.open, exchange.declare, confirm.select) are not by
		// the library, and a node that has accepted the connection and
		// then stalls (one paused or cut off mid-partition keeps sending
		// heartbeats) would hold publish forever. Past timeout the socket
		// is closed under them, which fails the pending call.
		stall := time.AfterFunc(timeout, func() { broker.Abort(conn, 0) })
		// Publishing to a missing exchange makes the broker close the
		// channel with 404 mid-batch; say "run topology first" up front, on
		// the channel that will publish (one round trip less).
		ch, err := conn.Channel()
		if err == nil {
			err = topo.RequireExchange(ch, topo.Exchange)
		}
		var p *confirm.Publisher
		var closed chan *amqp.Error
		if err == nil {
			closed = ch.NotifyClose(make(chan *amqp.Error, 1))
			// Await's timeout is send's tick; send keeps the caller's
			// Timeout itself, so that it can also watch for a signal.
			p, err = confirm.New(ch, window, min(timeout, pollStep))
		}
		// Stop false: the timer has fired, and closes the connection
		// whatever the calls returned.
		if !stall.Stop() {
			broker.Close(conn)
			g.d = dialed{err: fail.Errorf(fail.Unavailable, "the broker took the connection but did not open a publishing channel within %s (-timeout): a node paused or cut off from its cluster does this; nothing was published", timeout)}
			return
		}
		if err != nil {
			broker.Close(conn)
			g.d = dialed{err: fail.Broker(err, topo.ErrMissing)}
			return
		}
		// A broker under a memory or disk alarm stops reading from
		// publishers; its connection.blocked says why the confirm is late.
		blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 64))
		g.d = dialed{conn: conn, p: p, blocked: blocked, closed: closed}
	}()
	return g
}

// wait returns the connection, or why there is none; it stops waiting
// when ctx ends.
func (g *dialing) wait(ctx context.Context) (*dialed, error) {
	select {
	case <-g.done:
		return &g.d, g.d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close closes the connection, now if it is made, else when it is: exit
// never waits for a handshake. After a signal the broker gets a moment
// for its close-ok, not the usual two seconds.
func (g *dialing) close() {
	closeIt := func() {
		if g.d.conn == nil {
			return
		}
		if g.ctx.Err() != nil {
			broker.Abort(g.d.conn, 200*time.Millisecond)
			return
		}
		broker.Close(g.d.conn)
	}
	select {
	case <-g.done:
		closeIt()
	default:
		go func() { <-g.done; closeIt() }()
	}
}
