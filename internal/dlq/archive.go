package dlq

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/fail"
	"eaimq/internal/topo"
)

// purgedHeader marks a dead letter that purge moved to the archive: when,
// by whom, through what, and what its x-death said (from_queue, reason,
// dead_lettered_at, count), so that the archive's list says why it was
// dead-lettered even if a broker drops the x-death a client publishes
// (RabbitMQ 3.10 and 4.0 keep it; the header does not rely on that).
// restore takes it off again.
const purgedHeader = "x-eaimq-purged"

// Purged is the x-eaimq-purged header of an archived dead letter.
type Purged struct {
	At  time.Time `json:"at"`
	By  string    `json:"by"`
	Via string    `json:"via"`
}

// purgedOf reads the purge header; nil when the message was not purged.
func purgedOf(h amqp.Table) *Purged {
	t, ok := h[purgedHeader].(amqp.Table)
	if !ok {
		return nil
	}
	p := &Purged{}
	p.At, _ = t["at"].(time.Time)
	p.By, _ = t["by"].(string)
	p.Via, _ = t["via"].(string)
	return p
}

// deathOf fills in m's x-death fields from the purge header when the
// message has no x-death of its own.
func deathOf(m *dead, h amqp.Table) {
	t, ok := h[purgedHeader].(amqp.Table)
	if !ok || m.HasDeath {
		return
	}
	m.FromQueue, _ = t["from_queue"].(string)
	m.Broker, _ = t["reason"].(string)
	m.DeadAt, _ = t["dead_lettered_at"].(time.Time)
	m.Count, _ = t["count"].(int64)
	m.HasDeath = m.Broker != ""
}

// archived is the copy of m that purge puts in the archive: the message as
// it is (body, properties, headers, x-death included), persistent (the
// archive is there to keep it), with the purge header.
func archived(m *dead, a Actor) amqp.Publishing {
	p := publishing(m.d)
	p.Headers[purgedHeader] = amqp.Table{
		"at":               time.Now().UTC().Truncate(time.Second),
		"by":               a.Who,
		"via":              a.Via,
		"from_queue":       m.FromQueue,
		"reason":           m.Broker,
		"dead_lettered_at": m.DeadAt,
		"count":            m.Count,
	}
	return p
}

// restored is the copy of an archived m that restore puts back in
// claim.dead: the message as it was before its purge.
func restored(m *dead) amqp.Publishing {
	p := publishing(m.d)
	delete(p.Headers, purgedHeader)
	return p
}

// publishing is d as a message to publish again: its headers and
// properties kept, persistent; but not its expiration (the archive's
// retention is what keeps it, and a per-message TTL would drop it sooner)
// nor its user_id (the broker refuses, closing the channel, a user_id that
// is not the publishing user's, and dlq may run as another).
func publishing(d amqp.Delivery) amqp.Publishing {
	headers := amqp.Table{}
	for k, v := range d.Headers {
		headers[k] = v
	}
	return amqp.Publishing{
		Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: amqp.Persistent,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	}
}

// requireArchive checks, before purge touches anything, that the archive
// exists: a purge into a missing queue would be returned copy by copy (each
// dead letter stays), and the one-line refusal names both ways out.
func requireArchive(conn *amqp.Connection) error {
	ch, err := conn.Channel()
	if err != nil {
		return fail.New(fail.Unavailable, fmt.Errorf("open channel: %w", err))
	}
	_, err = ch.QueueDeclarePassive(topo.ArchiveQueue, true, false, false, false, nil)
	if err == nil {
		ch.Close()
		return nil
	}
	if broker.Code(err) == amqp.NotFound {
		return fail.Errorf(fail.Config, "queue %s does not exist in this vhost, and purge keeps what it purges there: "+
			"run topology to declare it, or add -no-archive to delete for good; nothing was purged", topo.ArchiveQueue)
	}
	return fail.New(fail.Unavailable, fmt.Errorf("check queue %s: %w", topo.ArchiveQueue, err))
}
