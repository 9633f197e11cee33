package main

import (
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
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
	return cli.Exitf(cli.ExitConfig, "%v: a rejected claim would be dropped by the broker, so none is rejected. "+
		"The claims stay in %s; run topology to declare %s, %s and their binding, then start the consumer again",
		err, topo.Queue, topo.DLX, topo.DeadQueue)
}
