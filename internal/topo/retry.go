package topo

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
)

// RetryQueue is the delay queue that holds a claim for d (the consumer's
// --retry-delays), named name (retry.QueueName). Nothing consumes it: a
// claim sits there until its x-message-ttl has passed, and the broker then
// dead-letters it through eai.claim (key claim) back to claim.in.
//
// Of type t, as claim.in is: a quorum delay queue dead-letters at least
// once (it keeps the claim until claim.in has confirmed it; a node failing
// in between cannot lose it), which the broker does only with
// x-overflow=reject-publish, the same pair as claim.in's (QueuesFor).
func RetryQueue(t QueueType, name string, d time.Duration) QueueSpec {
	args := amqp.Table{
		"x-message-ttl":             d.Milliseconds(),
		"x-dead-letter-exchange":    Exchange,
		"x-dead-letter-routing-key": RoutingKey,
	}
	if t == Quorum {
		args["x-queue-type"] = string(Quorum)
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	return QueueSpec{Name: name, Args: args}
}

// RetryState is what CheckRetryQueue found.
type RetryState int

const (
	RetryOK      RetryState = iota // exists, as RetryQueue of either type says
	RetryMissing                   // does not exist
	RetryDiffers                   // exists with other arguments
)

// CheckRetryQueue tells whether the delay queue for d exists as RetryQueue
// declares it, of either type: the consumer does not care whether the
// delay queues are classic or quorum, only that they hold and give back. As
// InspectQueue does, it asks with a passive declare, then a redeclare per
// type on fresh channels (a 404 or 406 closes the channel). It never
// creates the queue: a missing one is for topology to declare. differs is
// the broker's reason when the queue matches neither type.
func CheckRetryQueue(conn *amqp.Connection, name string, d time.Duration) (st RetryState, differs string, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, "", fmt.Errorf("open channel: %w", err)
	}
	if _, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err != nil {
		if broker.Code(err) == amqp.NotFound {
			return RetryMissing, "", nil
		}
		return 0, "", fmt.Errorf("check queue %s: %w", name, err)
	}
	ch.Close()
	for _, t := range QueueTypes {
		ch, err := conn.Channel()
		if err != nil {
			return 0, "", fmt.Errorf("open channel: %w", err)
		}
		err = DeclareQueue(ch, RetryQueue(t, name, d))
		if err == nil {
			ch.Close()
			return RetryOK, "", nil
		}
		if broker.Code(err) != amqp.PreconditionFailed {
			return 0, "", fmt.Errorf("check queue %s: %w", name, err)
		}
		differs = broker.Reason(err)
	}
	return RetryDiffers, differs, nil
}
