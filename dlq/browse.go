package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/cli"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// dead is one message of claim.dead with what we know of it.
type dead struct {
	d         amqp.Delivery
	Key       string // message_id, else the body's guid, else a body hash (store.Key)
	ClaimID   string
	DeadAt    time.Time
	FromQueue string
	Broker    string // the broker's reason (x-death: rejected, expired, maxlen)
	Count     int64  // x-death count
	Replays   int64  // x-eaimq-replays
	Rec       store.Record
	Known     bool // the store has a record of it
}

// ourReason is what the consumer recorded: why it dead-lettered the claim.
func (m *dead) ourReason() string {
	if !m.Known {
		return "unknown (no record in the store)"
	}
	r := m.Rec.DeadReason
	if r == "" {
		r = m.Rec.State
	}
	if m.Rec.LastStatus != 0 {
		r = fmt.Sprintf("%d: %s", m.Rec.LastStatus, r)
	} else if m.Rec.LastError != "" {
		r = fmt.Sprintf("%s: %s", m.Rec.LastError, r)
	}
	return r
}

// kind is the filter word for -reason: rejected (a 4xx from the partner),
// transient (failed twice), no-id, delivered (the store says it arrived
// after all), unknown.
func (m *dead) kind() string {
	switch {
	case !m.Known:
		return "unknown"
	case m.Rec.Delivered():
		return "delivered"
	case m.Rec.DeadReason == store.ReasonNoID:
		return "no-id"
	case m.Rec.LastStatus >= 400 && m.Rec.LastStatus < 500 && m.Rec.LastStatus != 408 && m.Rec.LastStatus != 429:
		return "rejected"
	}
	return "transient"
}

// browser walks claim.dead without consuming it.
//
// AMQP 0-9-1 has no "peek": browsing takes each message unacked with
// basic.get and gives it back. Nothing can be lost this way: a message
// taken unacked stays the broker's until it is acked, and every message
// not acked (all of them, for list and show) returns to claim.dead when
// the channel closes, or when the process dies, since the broker requeues
// a closed channel's unacked messages. What changes: the returned messages
// carry redelivered=true, and a classic queue puts them back in their
// original order ahead of anything published meanwhile.
//
// basic.get is not limited by basic.qos, so the walk reaches every message,
// and this process keeps none of them: each is printed (or acted on) and
// dropped, only its delivery tag living on in the broker. Memory stays flat
// for a 100,000-message DLQ; the broker holds the unacked set, which is its
// job anyway.
type browser struct {
	ch    *amqp.Channel
	store *store.Store // nil when there is none
}

func newBrowser(conn *amqp.Connection, st *store.Store) (*browser, error) {
	ch, err := conn.Channel()
	if err == nil {
		err = topo.RequireQueue(ch, topo.DeadQueue)
	}
	if err != nil {
		return nil, cli.Broker(err, topo.ErrMissing)
	}
	return &browser{ch: ch, store: st}, nil
}

// walk calls fn for each message of claim.dead, at most limit (0: all).
// fn returns false to stop.
func (b *browser) walk(ctx context.Context, limit int, fn func(*dead) (bool, error)) error {
	for n := 0; limit == 0 || n < limit; n++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d, ok, err := b.ch.Get(topo.DeadQueue, false /* autoAck: never */)
		if err != nil {
			return cli.Exit(cli.ExitUnavailable, fmt.Errorf("basic.get %s: %w", topo.DeadQueue, err))
		}
		if !ok {
			return nil
		}
		m := b.describe(ctx, d)
		more, err := fn(m)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (b *browser) describe(ctx context.Context, d amqp.Delivery) *dead {
	m := &dead{d: d}
	var peek struct {
		ClaimID string `json:"claimId"`
		Guid    string `json:"guid"`
	}
	if json.Unmarshal(d.Body, &peek) == nil {
		m.ClaimID = peek.ClaimID
	}
	m.Key = store.Key(d.MessageId, peek.Guid, d.Body)
	if deaths, ok := d.Headers["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			m.FromQueue, _ = t["queue"].(string)
			m.Broker, _ = t["reason"].(string)
			m.Count, _ = t["count"].(int64)
			m.DeadAt, _ = t["time"].(time.Time)
		}
	}
	m.Replays, _ = d.Headers[replayHeader].(int64)
	if b.store != nil {
		if rec, found, err := b.store.Get(ctx, m.Key); err == nil && found {
			m.Rec, m.Known = rec, true
		}
	}
	return m
}
