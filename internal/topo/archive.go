package topo

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
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
//
// An archive of the other type with the same retention is kept as it is,
// and other names its type: -migrate moves claim.in and claim.dead, not
// the archive (what it keeps is already purged), so a deployment moved to
// quorum still has the classic archive its first topology declared, and
// refusing it would stop a deployment that works.
func DeclareArchive(conn *amqp.Connection, t QueueType, retention time.Duration) (other QueueType, err error) {
	s := ArchiveSpec(t, retention)
	err = declareOn(conn, s)
	if err == nil || broker.Code(err) != amqp.PreconditionFailed {
		return "", wrapArchive(s, err)
	}
	if declareOn(conn, ArchiveSpec(t.Other(), retention)) == nil {
		return t.Other(), nil
	}
	return "", wrapArchive(s, err)
}

// declareOn declares s on a channel of its own: a 406 closes it.
func declareOn(conn *amqp.Connection, s QueueSpec) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	return DeclareQueue(ch, s)
}

func wrapArchive(s QueueSpec, err error) error {
	if err == nil {
		return nil
	}
	return &DeclareError{Kind: "queue", Name: s.Name, Object: s.String(), Err: err}
}
