package topo

import (
	"fmt"
	"math"
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
//
// Each quorum queue also gets an explicit x-delivery-limit (DeliveryLimit,
// DeadDeliveryLimit): a quorum queue counts every return of a message
// (a nack with requeue, a channel or connection closed while it was
// unacked) and at the limit dead-letters it, or drops it when the queue
// has no dead-letter exchange. RabbitMQ 3.x has no limit unless one is
// set; 4.x sets 20 by default. Set here, the limit is the same on both
// and visible in the queue's arguments. It is an argument rather than a
// policy because topology speaks AMQP only, and a policy can be set only
// with rabbitmqctl or the management API (docs/upgrade.md).
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
		switch s.Name {
		case Queue:
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
			args[DeliveryLimitArg] = int64(DeliveryLimit)
		case DeadQueue:
			args[DeliveryLimitArg] = int64(DeadDeliveryLimit)
		}
		out[i] = QueueSpec{Name: s.Name, Args: args}
	}
	return out
}

// DeliveryLimitArg is the queue argument of a quorum queue's delivery limit.
const DeliveryLimitArg = "x-delivery-limit"

// DeliveryLimit is quorum claim.in's x-delivery-limit: the returns a claim
// may have before the broker dead-letters it to claim.dead (reason
// delivery_limit in its x-death header). The consumer itself returns a
// claim at most once (the requeue-once rule; with --retry-delays, never:
// each retry is a new copy), so the other returns are a consumer killed,
// or its connection lost, while it held the claim: 20 of those is a crash
// loop, and the claim waits in claim.dead to be replayed (dlq) instead of
// taking the consumers down forever. 20 is also what RabbitMQ 4 applies
// by default, so an upgrade does not change it.
const DeliveryLimit = 20

// DeadDeliveryLimit is quorum claim.dead's x-delivery-limit: as high as
// the broker takes on every version (the largest 32-bit integer; -1, 4.x's
// "no limit", makes RabbitMQ 3.x drop a message at its first return).
// claim.dead has no dead-letter exchange, so a message at its limit is
// dropped, and every dlq list, show or page of dlq serve returns every
// dead letter it reads: with 4.x's default of 20, the 21st look would
// delete them.
const DeadDeliveryLimit = math.MaxInt32

// WithoutLimit is s without its x-delivery-limit: a quorum queue as eaimq
// declared it before it set one. Such a queue is kept as it is (a queue's
// arguments cannot change in place, and redeclaring it with the limit is a
// 406); topology says so, -check reports it, and -migrate quorum moves it
// to a queue with the limit.
func WithoutLimit(s QueueSpec) QueueSpec {
	if _, ok := s.Args[DeliveryLimitArg]; !ok {
		return s
	}
	args := amqp.Table{}
	for k, v := range s.Args {
		if k != DeliveryLimitArg {
			args[k] = v
		}
	}
	return QueueSpec{Name: s.Name, Args: args}
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
// does for classic ones. A quorum queue declared by an older eaimq, without
// its delivery limit, is kept as it is (see DeclareKept).
func DeclareFor(conn *amqp.Connection, t QueueType) error {
	_, err := declare(conn, QueuesFor(t))
	return err
}

// DeclareKept is DeclareFor, and names the queues it kept as an older eaimq
// declared them (WithoutLimit): redeclaring one with the limit would be a
// 406, and failing there would stop a deployment that worked, so the
// caller says so instead.
func DeclareKept(conn *amqp.Connection, t QueueType) (kept []string, err error) {
	return declare(conn, QueuesFor(t))
}

// QueueState is what InspectQueue found.
type QueueState struct {
	Exists    bool
	Type      QueueType // the contract's type it matches; "" when it matches neither
	Spec      QueueSpec // the spec it matches, when Type is not ""
	NoLimit   bool      // it matches the quorum spec without x-delivery-limit (WithoutLimit)
	Differs   string    // when Type is "": the broker's reason against each type, joined
	Messages  int       // ready messages, from the passive declare
	Consumers int
}

// specsOf are the specs queue name may match as type t: the contract's,
// then the one an older eaimq declared (without the delivery limit).
func specsOf(t QueueType, name string) []QueueSpec {
	s := SpecFor(t, name)
	if older := WithoutLimit(s); len(older.Args) != len(s.Args) {
		return []QueueSpec{s, older}
	}
	return []QueueSpec{s}
}

// InspectQueue tells whether queue name (Queue or DeadQueue) exists, and
// which of the contract's types it is. AMQP 0-9-1 has no way to read a
// queue's arguments, so it asks the broker the way -check does: a passive
// declare (exists? how many messages and consumers?), then a redeclare with
// each type's spec (and the older quorum one) on a fresh channel, since a
// 406 closes the channel it came on. Redeclaring an existing queue with
// the properties it has is a no-op and with others a 406, so it changes
// nothing.
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
		for i, s := range specsOf(t, name) {
			ch, err := conn.Channel()
			if err != nil {
				return QueueState{}, fmt.Errorf("open channel: %w", err)
			}
			err = DeclareQueue(ch, s)
			if err == nil {
				ch.Close()
				st.Type, st.Spec, st.NoLimit = t, s, i > 0
				return st, nil
			}
			if broker.Code(err) != amqp.PreconditionFailed {
				return QueueState{}, fmt.Errorf("check queue %s: %w", name, err)
			}
			if i == 0 { // the older spec's reason would only repeat it
				reasons = append(reasons, fmt.Sprintf("not %s: %s", t, broker.Reason(err)))
			}
		}
	}
	st.Differs = strings.Join(reasons, "; ")
	return st, nil
}

// QueuesIn is the contract's Queues for the type claim.in has on conn, each
// as it exists (with or without its delivery limit): the consumer
// redeclares claim.in with these to check its dead-letter arguments. When
// claim.in is missing, matches neither type, or the broker cannot be
// asked, it is Queues (classic), and the caller's own declare then meets
// the same 404, 406 or error it would have met before.
func QueuesIn(conn *amqp.Connection) []QueueSpec {
	st, err := InspectQueue(conn, Queue)
	if err != nil || st.Type == "" {
		return Queues
	}
	out := QueuesFor(st.Type)
	for i, s := range out {
		if s.Name == Queue {
			out[i] = st.Spec
		} else if dst, err := InspectQueue(conn, s.Name); err == nil && dst.Type == st.Type {
			out[i] = dst.Spec
		}
	}
	return out
}
