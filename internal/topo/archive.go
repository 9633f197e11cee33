package topo

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ArchiveQueue is where dlq purge moves a dead letter instead of deleting
// it, so that a purge can be undone (dlq restore) for as long as the
// archive keeps it. It is bound to no exchange: only dlq publishes to it,
// through the default exchange with mandatory, so nothing else can route a
// message there by mistake.
const ArchiveQueue = "claim.dead.archive"

// DefaultArchiveRetention is how long the archive keeps a purged dead
// letter (topology -archive-retention): two weeks, long enough for a
// purge noticed after a weekend and a holiday to be undone.
const DefaultArchiveRetention = 14 * 24 * time.Hour

// ArchiveSpec is the archive queue of type t keeping each message for
// retention (x-message-ttl). It has no dead-letter exchange: a purged
// claim past its retention goes for good, which is what the purge asked.
//
// Quorum, like claim.dead: replicated, and with the highest delivery
// limit every broker version takes (DeadDeliveryLimit), since every
// dlq list -archive returns each message it reads and RabbitMQ 4's
// default of 20 would drop an archived claim at its 21st look.
func ArchiveSpec(t QueueType, retention time.Duration) QueueSpec {
	args := amqp.Table{"x-message-ttl": retention.Milliseconds()}
	if t == Quorum {
		args["x-queue-type"] = string(Quorum)
		args[DeliveryLimitArg] = int64(DeadDeliveryLimit)
	}
	return QueueSpec{Name: ArchiveQueue, Args: args}
}

// DeclareArchive declares the archive queue of type t with retention on
// conn, after the contract (Declare): the archive is dlq's, and the
// lab's objects come first, as they always did. A 406 is a *DeclareError,
// for Explain.
func DeclareArchive(conn *amqp.Connection, t QueueType, retention time.Duration) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	s := ArchiveSpec(t, retention)
	if err := DeclareQueue(ch, s); err != nil {
		return &DeclareError{Kind: "queue", Name: s.Name, Object: s.String(), Err: err}
	}
	return nil
}
