package relay

import (
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/fail"
	"eaimq/internal/topo"
)

// deadRoute makes sure, before every reject(requeue=false), that the
// broker will dead-letter the claim rather than drop it. The broker drops
// a rejected message in silence when its dead-letter route is gone, and the
// usual way it goes is an operator deleting claim.dead by hand to "empty
// the DLQ" without running topology again. Checking once at start-up is not
// enough: the queue can go while the consumer runs.
//
// The check is queue.bind(claim.dead, claim.dead, eai.dlx): it fails with
// 404 when either the queue or the exchange is missing, and (re)makes the
// contract's binding when only that is missing, so one round trip covers
// the whole route. A user without the permissions to bind gets a passive
// declare of both instead (the binding then goes unchecked, which start-up
// warned about). The check costs one round trip per dead letter, and dead
// letters are the rare path. A route deleted in the instant between the
// check and the reject cannot be caught from the client; that window is a
// round trip wide.
type deadRoute struct {
	mu      sync.Mutex
	conn    *amqp.Connection
	ch      *amqp.Channel // its own: a 404 closes the channel it came on
	canBind bool
}

// errRouteMissing: the dead-letter route is gone.
var errRouteMissing = errors.New("the dead-letter route is missing")

func newDeadRoute(conn *amqp.Connection, canBind bool) *deadRoute {
	return &deadRoute{conn: conn, canBind: canBind}
}

// verify returns nil when a rejection now would reach claim.dead, an
// error wrapping errRouteMissing when it would be dropped, or another
// error when the broker could not be asked.
func (r *deadRoute) verify() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil || r.ch.IsClosed() {
		ch, err := r.conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		r.ch = ch
	}
	var err error
	if r.canBind {
		err = r.ch.QueueBind(topo.DeadQueue, topo.DeadRouteKey, topo.DLX, false /* noWait */, nil)
	} else {
		_, err = r.ch.QueueDeclarePassive(topo.DeadQueue, true, false, false, false, nil)
		if err == nil {
			err = r.ch.ExchangeDeclarePassive(topo.DLX, amqp.ExchangeDirect, true, false, false, false, nil)
		}
	}
	if broker.Code(err) == amqp.NotFound {
		r.ch = nil
		return fmt.Errorf("%w: %s", errRouteMissing, broker.Reason(err))
	}
	if err != nil {
		r.ch = nil
		return fmt.Errorf("check the dead-letter route: %w", err)
	}
	return nil
}

// routeMissing is the error that ends the run when the route is gone: the
// claim in hand stays unacked and goes back to claim.in, its decision on
// record, so that after topology runs again its redelivered copy is
// dead-lettered without another call.
func routeMissing(err error) error {
	return fail.Errorf(fail.Config, "%v: a rejected claim would be dropped by the broker, so none is rejected. "+
		"The claims stay in %s; run topology to declare %s, %s and their binding, then start the consumer again",
		err, topo.Queue, topo.DLX, topo.DeadQueue)
}

// checkDeadLettering makes sure a reject(requeue=false) dead-letters a
// claim rather than drops it: claim.in must carry the contract's
// x-dead-letter-* arguments (redeclaring it with them is a no-op when they
// match, a 406 when they differ), and eai.dlx, claim.dead and their binding
// must exist (dead-lettering into a missing route silently drops the
// message). It probes on a channel of its own, since a 406 or 404 closes the
// channel. A user without configure permission cannot redeclare; then the
// arguments go unchecked, with a warning, rather than the consumer refusing
// to run. It reports whether this user may bind (see deadRoute).
func (r *relay) checkDeadLettering(conn *amqp.Connection) (canBind bool, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return false, fail.New(fail.Unavailable, fmt.Errorf("open channel: %w", err))
	}
	// claim.in may be classic (the lab's) or quorum (topology -queue-type
	// quorum): check it against the arguments of the type it is.
	for _, q := range topo.QueuesIn(conn) {
		if q.Name != topo.Queue {
			continue
		}
		if err := topo.DeclareQueue(ch, q); err != nil {
			if broker.Code(err) == amqp.AccessRefused {
				r.cfg.Log.Warn("cannot verify claim.in's dead-letter arguments (no configure permission); assuming topology declared them")
				if ch, err = conn.Channel(); err != nil {
					return false, fail.New(fail.Unavailable, fmt.Errorf("open channel: %w", err))
				}
				continue
			}
			if broker.Code(err) == amqp.PreconditionFailed {
				return false, fail.Errorf(fail.Config, "%s differs from the contract, so a rejected claim could be dropped instead of dead-lettered: %s (run topology to see the remedy)", topo.Queue, broker.Reason(err))
			}
			return false, fail.New(fail.Unavailable, fmt.Errorf("check %s arguments: %w", topo.Queue, err))
		}
	}
	ch.Close()
	// The rest of the route: the same check as before every reject.
	canBind = true
	err = newDeadRoute(conn, true).verify()
	if broker.Code(err) == amqp.AccessRefused {
		r.cfg.Log.Warn("cannot verify the binding eai.dlx -> claim.dead (no permission to bind); checking that both exist")
		canBind = false
		err = newDeadRoute(conn, false).verify()
	}
	switch {
	case errors.Is(err, errRouteMissing):
		return false, routeMissing(err)
	case err != nil:
		return false, fail.New(fail.Unavailable, err)
	}
	return canBind, nil
}
