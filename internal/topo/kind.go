package topo

import (
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
)

// QueueType is the kind of queue claim.in and claim.dead are: the lab's
// single-node classic queues (the default), or quorum queues, replicated
// over a cluster's nodes.
type QueueType string

const (
	Classic QueueType = "classic"
	Quorum  QueueType = "quorum"
)

// QueueTypes are the types topology can declare, the default first.
var QueueTypes = []QueueType{Classic, Quorum}

// ParseQueueType reads a -queue-type or -migrate value.
func ParseQueueType(s string) (QueueType, error) {
	for _, t := range QueueTypes {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("queue type %q: want classic or quorum", s)
}

// Other is the type that is not t.
func (t QueueType) Other() QueueType {
	if t == Quorum {
		return Classic
	}
	return Quorum
}

// QueuesFor is Queues for queue type t. Classic is Queues itself, the lab's
// contract unchanged. Quorum adds x-queue-type to both queues, and to
// claim.in at-least-once dead-lettering: with the default (at-most-once) a
// rejected claim leaves claim.in before claim.dead has it, and a node that
// fails in between loses it. The broker does at-least-once only for a
// queue that rejects publishes when full (x-overflow=reject-publish; with
// drop-head it would fall back to at-most-once), so that argument comes
// with it.
func QueuesFor(t QueueType) []QueueSpec {
	if t != Quorum {
		return Queues
	}
	out := make([]QueueSpec, len(Queues))
	for i, s := range Queues {
		args := amqp.Table{"x-queue-type": string(Quorum)}
		for k, v := range s.Args {
			args[k] = v
		}
		if s.Name == Queue {
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
		out[i] = QueueSpec{Name: s.Name, Args: args}
	}
	return out
}

// SpecFor is the spec of queue name (Queue or DeadQueue) as type t.
func SpecFor(t QueueType, name string) QueueSpec {
	for _, s := range QueuesFor(t) {
		if s.Name == name {
			return s
		}
	}
	panic("topo: no queue " + name + " in the contract")
}

// Type is the queue type s declares.
func (s QueueSpec) Type() QueueType {
	if s.Args["x-queue-type"] == string(Quorum) {
		return Quorum
	}
	return Classic
}

// DeclareFor declares the whole topology with queues of type t, as Declare
// does for classic ones.
func DeclareFor(conn *amqp.Connection, t QueueType) error {
	return declare(conn, QueuesFor(t))
}

// QueueState is what InspectQueue found.
type QueueState struct {
	Exists    bool
	Type      QueueType // the contract's type it matches; "" when it matches neither
	Differs   string    // when Type is "": the broker's reason against each type, joined
	Messages  int       // ready messages, from the passive declare
	Consumers int
}

// InspectQueue tells whether queue name (Queue or DeadQueue) exists, and
// which of the contract's types it is. AMQP 0-9-1 has no way to read a
// queue's arguments, so it asks the broker the way -check does: a passive
// declare (exists? how many messages and consumers?), then a redeclare with
// each type's spec on a fresh channel, since a 406 closes the channel it
// came on. Redeclaring an existing queue with the properties it has is a
// no-op and with others a 406, so it changes nothing.
func InspectQueue(conn *amqp.Connection, name string) (QueueState, error) {
	ch, err := conn.Channel()
	if err != nil {
		return QueueState{}, fmt.Errorf("open channel: %w", err)
	}
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		if broker.Code(err) == amqp.NotFound {
			return QueueState{}, nil
		}
		return QueueState{}, fmt.Errorf("check queue %s: %w", name, err)
	}
	ch.Close()
	st := QueueState{Exists: true, Messages: q.Messages, Consumers: q.Consumers}
	var reasons []string
	for _, t := range QueueTypes {
		ch, err := conn.Channel()
		if err != nil {
			return QueueState{}, fmt.Errorf("open channel: %w", err)
		}
		err = DeclareQueue(ch, SpecFor(t, name))
		if err == nil {
			ch.Close()
			st.Type = t
			return st, nil
		}
		if broker.Code(err) != amqp.PreconditionFailed {
			return QueueState{}, fmt.Errorf("check queue %s: %w", name, err)
		}
		reasons = append(reasons, fmt.Sprintf("not %s: %s", t, broker.Reason(err)))
	}
	st.Differs = strings.Join(reasons, "; ")
	return st, nil
}

// QueuesIn is the contract's Queues for the type claim.in has on conn: the
// consumer redeclares claim.in with these to check its dead-letter
// arguments. When claim.in is missing, matches neither type, or the broker
// cannot be asked, it is Queues (classic), and the caller's own declare
// then meets the same 404, 406 or error it would have met before.
func QueuesIn(conn *amqp.Connection) []QueueSpec {
	st, err := InspectQueue(conn, Queue)
	if err != nil || st.Type == "" {
		return Queues
	}
	return QueuesFor(st.Type)
}
