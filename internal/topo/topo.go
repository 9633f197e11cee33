// Package topo is the topology contract of the claim relay (SPEC §1): the
// names every program agrees on, and the one place that declares them.
package topo

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
)

// The names of the contract.
const (
	Exchange     = "eai.claim"
	DLX          = "eai.dlx"
	Queue        = "claim.in"
	DeadQueue    = "claim.dead"
	RoutingKey   = "claim"
	DeadRouteKey = "claim.dead"
)

// Exchanges are declared before the queues that name them, the DLX first, so
// that claim.in never exists for a moment with a dead-letter exchange that
// does not (a rejection then would drop the claim silently).
var Exchanges = []ExchangeSpec{
	{Name: DLX, Kind: amqp.ExchangeDirect},
	{Name: Exchange, Kind: amqp.ExchangeDirect},
}

// Queues are declared after the exchanges; the dead-letter queue first for
// the same reason.
var Queues = []QueueSpec{
	{Name: DeadQueue},
	{Name: Queue, Args: amqp.Table{
		"x-dead-letter-exchange":    DLX,
		"x-dead-letter-routing-key": DeadRouteKey,
	}},
}

// Bindings are declared last.
var Bindings = []BindingSpec{
	{Exchange: Exchange, Queue: Queue, Key: RoutingKey},
	{Exchange: DLX, Queue: DeadQueue, Key: DeadRouteKey},
}

// ExchangeSpec is a durable, non-internal exchange.
type ExchangeSpec struct{ Name, Kind string }

// QueueSpec is a durable queue; classic unless Args say x-queue-type.
type QueueSpec struct {
	Name string
	Args amqp.Table
}

// BindingSpec binds Queue to Exchange with Key.
type BindingSpec struct{ Exchange, Queue, Key string }

func (s ExchangeSpec) String() string {
	return fmt.Sprintf("exchange %s (%s, durable)", s.Name, s.Kind)
}

func (s QueueSpec) String() string {
	if len(s.Args) == 0 {
		return fmt.Sprintf("queue %s (durable)", s.Name)
	}
	return fmt.Sprintf("queue %s (durable, %s)", s.Name, FormatArgs(s.Args))
}

func (s BindingSpec) String() string {
	return fmt.Sprintf("binding %s -> %s (key %s)", s.Exchange, s.Queue, s.Key)
}

// FormatArgs prints a table's arguments in a stable order.
func FormatArgs(t amqp.Table) string {
	// The contract's arguments in a fixed order read best: the classic
	// queue's two, then what a quorum queue adds (QueuesFor).
	out := ""
	for _, k := range []string{"x-queue-type", "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy", "x-overflow", DeliveryLimitArg, "x-message-ttl"} {
		if v, ok := t[k]; ok {
			if out != "" {
				out += ", "
			}
			out += fmt.Sprintf("%s=%v", k, v)
		}
	}
	return out
}

// DeclareExchange declares s on ch.
func DeclareExchange(ch *amqp.Channel, s ExchangeSpec) error {
	return ch.ExchangeDeclare(s.Name, s.Kind, true /* durable */, false /* autoDelete */, false /* internal */, false /* noWait */, nil)
}

// DeclareQueue declares s on ch.
func DeclareQueue(ch *amqp.Channel, s QueueSpec) error {
	_, err := ch.QueueDeclare(s.Name, true /* durable */, false /* autoDelete */, false /* exclusive */, false /* noWait */, s.Args)
	return err
}

// DeclareBinding declares s on ch.
func DeclareBinding(ch *amqp.Channel, s BindingSpec) error {
	return ch.QueueBind(s.Queue, s.Key, s.Exchange, false /* noWait */, nil)
}

// Declare declares the whole topology on conn, one channel, in contract
// order. A 406 closes the channel; the error names the object it came from.
func Declare(conn *amqp.Connection) error {
	_, err := declare(conn, Queues)
	return err
}

// declare declares the exchanges, queues and bindings in contract order on
// one channel, and names the queues it kept as an older eaimq declared
// them (declareQueue).
func declare(conn *amqp.Connection, queues []QueueSpec) (kept []string, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	defer func() { ch.Close() }() // the channel in use at the end: a kept queue replaced it
	for _, s := range Exchanges {
		if err := DeclareExchange(ch, s); err != nil {
			return nil, &DeclareError{Kind: "exchange", Name: s.Name, Object: s.String(), Err: err}
		}
	}
	for _, s := range queues {
		older, err := declareQueue(conn, &ch, s)
		if err != nil {
			return nil, &DeclareError{Kind: "queue", Name: s.Name, Object: s.String(), Err: err}
		}
		if older {
			kept = append(kept, s.Name)
		}
	}
	for _, s := range Bindings {
		if err := DeclareBinding(ch, s); err != nil {
			return nil, &DeclareError{Kind: "binding", Name: s.Queue, Object: s.String(), Err: err}
		}
	}
	return kept, nil
}

// declareQueue declares s on *ch. When the broker refuses (406) and the
// queue exists as an older eaimq declared it, without the delivery limit
// (WithoutLimit), the queue is kept as it is and older is true: a queue's
// arguments cannot change in place, and failing here would stop a
// deployment that worked. A 406 closes its channel, so *ch is a new one
// then. Any other difference is the first 406, as it was.
func declareQueue(conn *amqp.Connection, ch **amqp.Channel, s QueueSpec) (older bool, err error) {
	err = DeclareQueue(*ch, s)
	prior := WithoutLimit(s)
	if err == nil || broker.Code(err) != amqp.PreconditionFailed || len(prior.Args) == len(s.Args) {
		return false, err
	}
	c, cerr := conn.Channel()
	if cerr != nil {
		return false, err
	}
	*ch = c
	if DeclareQueue(c, prior) != nil {
		return false, err
	}
	return true, nil
}

// DeclareError names the object whose declaration failed.
type DeclareError struct {
	Kind   string // exchange, queue or binding
	Name   string
	Object string // the object as the contract wants it
	Err    error
}

func (e *DeclareError) Error() string { return fmt.Sprintf("declare %s: %v", e.Object, e.Err) }
func (e *DeclareError) Unwrap() error { return e.Err }

// ErrMissing is wrapped by RequireExchange and RequireQueue when the object
// does not exist: the programs turn it into "run topology first".
var ErrMissing = errors.New("run topology first")

// RequireExchange checks with a passive declare on ch that exchange name
// exists. When it does not, the broker has closed ch (404) and the error
// wraps ErrMissing; otherwise ch is ready for use.
func RequireExchange(ch *amqp.Channel, name string) error {
	return require("exchange", name, ch.ExchangeDeclarePassive(name, amqp.ExchangeDirect, true, false, false, false, nil))
}

// RequireQueue is RequireExchange for a queue.
func RequireQueue(ch *amqp.Channel, name string) error {
	_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	return require("queue", name, err)
}

func require(kind, name string, err error) error {
	if err == nil {
		return nil
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return fmt.Errorf("%s %s does not exist in this vhost: %w", kind, name, ErrMissing)
	}
	return fmt.Errorf("check %s %s: %w", kind, name, err)
}
