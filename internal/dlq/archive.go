package dlq

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/confirm"
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

// moveWindow is how many copies a move publishes before it awaits their
// confirms and acks the originals.
const moveWindow = 128

// mover moves messages of a walk to queue to: a copy through the default
// exchange with mandatory, and the original acked only after the broker
// confirmed the copy and did not return it. As with replay, the order is
// the point: ack first and a crash before the copy is in loses the claim;
// copy first and a crash before the ack leaves it in both queues, which a
// second purge or restore finds and moves again.
type mover struct {
	p       *confirm.Publisher
	to      string
	copyOf  func(*dead) amqp.Publishing
	moved   func(key string)
	refused func(key, why string)
	hooks   Hooks
	batch   []*dead
	n       int // moved
	refuses int
}

// newMover opens the confirming channel of a move on b's connection; the
// caller closes it with close.
func newMover(b *Browser, to string, copyOf func(*dead) amqp.Publishing) (*mover, func(), error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return nil, nil, fail.New(fail.Unavailable, fmt.Errorf("open channel: %w", err))
	}
	p, err := confirm.New(ch, moveWindow, 10*time.Second)
	if err != nil {
		return nil, nil, fail.New(fail.Unavailable, err)
	}
	mv := &mover{p: p, to: to, copyOf: copyOf, moved: func(string) {}, refused: func(string, string) {}}
	return mv, func() { ch.Close() }, nil
}

func (mv *mover) take(ctx context.Context, m *dead) error {
	mv.batch = append(mv.batch, m)
	if len(mv.batch) == moveWindow {
		return mv.flush(ctx)
	}
	return nil
}

// flush publishes the batch's copies, awaits their confirms, then acks the
// originals of those the broker took; a returned or nacked copy leaves its
// original where it is.
func (mv *mover) flush(ctx context.Context) error {
	if len(mv.batch) == 0 {
		return nil
	}
	byTag := make(map[uint64]*dead, len(mv.batch))
	for _, m := range mv.batch {
		tag, err := mv.p.Publish(ctx, "", mv.to, mv.copyOf(m))
		if err != nil {
			return fail.New(fail.Unavailable, fmt.Errorf("publish copy of %s to %s: %w", field(m.Key), mv.to, err))
		}
		byTag[tag] = m
	}
	var ok []*dead
	for range mv.batch {
		out, err := mv.p.Await()
		if err != nil {
			return fail.New(fail.TempFail, fmt.Errorf("%w; the messages of this batch stay where they were", err))
		}
		m := byTag[out.Tag]
		switch {
		case out.Acked:
			ok = append(ok, m)
		case out.Returned != "":
			mv.refuses++
			mv.refused(m.Key, fmt.Sprintf("%s returned the copy (%s); it stays where it was", mv.to, field(out.Returned)))
		default:
			mv.refuses++
			mv.refused(m.Key, fmt.Sprintf("the broker nacked the copy for %s (full, or refusing); it stays where it was", mv.to))
		}
	}
	if mv.hooks.AfterConfirm != nil {
		if err := mv.hooks.AfterConfirm(); err != nil {
			return err
		}
	}
	for _, m := range ok {
		if err := m.d.Ack(false); err != nil {
			return fail.New(fail.Unavailable, fmt.Errorf("ack %s (its copy is in %s; the original stays): %w", field(m.Key), mv.to, err))
		}
		mv.n++
		mv.moved(m.Key)
	}
	mv.batch = mv.batch[:0]
	return nil
}

// moveSelected walks b and moves what sel selects with mv: one pass over
// what the queue held when the walk started, then what sel resolves at
// its end (the claimIds).
func moveSelected(ctx context.Context, b *Browser, sel selection, mv *mover) error {
	err := b.walk(ctx, sel.limit, func(m *dead) (bool, error) {
		if !sel.selects(m) {
			return true, nil
		}
		return true, mv.take(ctx, m)
	})
	for _, m := range sel.after() {
		if err == nil {
			err = mv.take(ctx, m)
		}
	}
	if err == nil {
		err = mv.flush(ctx)
	}
	return err
}
