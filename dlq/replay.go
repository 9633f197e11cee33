package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/cli"
	"eaimq/internal/confirm"
	"eaimq/internal/topo"
)

// replayHeader counts how often a claim was replayed from the DLQ.
const replayHeader = "x-eaimq-replays"

// editHeader marks a copy whose body a person edited before it was replayed
// (dlq serve's edit and retry): when and by what it was edited, and the
// sha256 of the body it replaced, so that the claim's history stays
// readable in the message itself.
const editHeader = "x-eaimq-edited"

// replayWindow is how many copies are published before their confirms are
// awaited and their dead copies acked.
const replayWindow = 128

// afterConfirm, when set (tests only), runs after a batch is confirmed and
// before its dead copies are acked; returning an error stops the replay
// there, as a crash would.
var afterConfirm func() error

// selection is what one replay or purge acts on: the dead letters of a
// walk of at most limit (0: all) that selects accepts.
type selection struct {
	limit   int
	selects func(*dead) bool
}

// rules are replay's limits: -force and -max-replays, and an edited body
// (dlq serve) that replaces the dead letter's.
type rules struct {
	force      bool
	maxReplays int
	edit       *edit
}

// edit is a body a person fixed, already checked as publish checks a claim.
type edit struct {
	body []byte
	guid string // its guid: the message_id of a copy whose dead letter had none
	by   string // what edited it, for the header
}

// noteKind is what replay did with one dead letter.
type noteKind int

const (
	noteReplayed  noteKind = iota // copy confirmed, dead copy acked
	noteDelivered                 // skipped: the store records it as delivered
	noteAgain                     // skipped: replayed once already in this run
	noteCapped                    // refused: over -max-replays
	noteRefused                   // refused by the broker (nack or return)
)

// note is one line of replay's report. The CLI prints it, dlq serve shows
// it: one sentence for both.
type note struct {
	kind   noteKind
	key    string
	detail string // the broker's reason for a return; the count for noteCapped
}

func (n note) text() string {
	k := field(n.key)
	switch n.kind {
	case noteReplayed:
		return "replayed " + k
	case noteDelivered:
		return "skipped " + k + ": the store records it as delivered (-force replays it anyway)"
	case noteAgain:
		return "skipped " + k + ": replayed once already in this run; this copy stays in claim.dead"
	case noteCapped:
		return k + ": not replayed: " + n.detail + "; it stays in claim.dead. Fix the claim or the partner, then -force"
	case noteRefused:
		return k + ": not replayed: " + n.detail + ". It stays in claim.dead"
	}
	return k
}

// failed says whether the note goes to stderr (the CLI) and counts as a
// refusal (exit 1, the page's "refused").
func (n note) failed() bool { return n.kind == noteCapped || n.kind == noteRefused }

// tally counts what replay did.
type tally struct {
	replayed, delivered, again, capped, refused int
}

func (t *tally) add(n note) {
	switch n.kind {
	case noteReplayed:
		t.replayed++
	case noteDelivered:
		t.delivered++
	case noteAgain:
		t.again++
	case noteCapped:
		t.capped++
	case noteRefused:
		t.refused++
	}
}

func (t tally) String() string {
	return fmt.Sprintf("%d replayed, %d skipped as delivered, %d skipped as replayed in this run, %d over -max-replays, %d refused by the broker",
		t.replayed, t.delivered, t.again, t.capped, t.refused)
}

// replay is the CLI's command: replayDead, each note printed as it comes.
func replay(ctx context.Context, conn *amqp.Connection, b *browser, o *options, stdout, stderr io.Writer) error {
	t, err := replayDead(ctx, conn, b, selection{o.limit, o.selects}, rules{force: o.force, maxReplays: o.maxReplays}, func(n note) {
		if n.failed() {
			fmt.Fprintf(stderr, "dlq: %s\n", n.text())
		} else {
			fmt.Fprintln(stdout, n.text())
		}
	})
	fmt.Fprintf(stdout, "dlq: %s\n", t)
	if err != nil {
		return err
	}
	missing := o.missing(stderr, b)
	if t.refused+t.capped+missing > 0 {
		return cli.Exitf(cli.ExitFailure, "%d over -max-replays, %d refused by the broker, %d named ID(s) not in claim.dead", t.capped, t.refused, missing)
	}
	return nil
}

// replayDead publishes a copy of each selected dead letter to eai.claim
// and acks the dead copy only after the broker confirmed and routed the
// copy. The order is the whole point: ack first and a crash before the
// publish loses the claim; publish first and a crash before the ack leaves
// a duplicate, which the consumer's dedup record absorbs.
//
// It is the one replay of this program: dlq replay and every retry of dlq
// serve (one, a group, an edited claim) go through it, so the page is
// exactly as safe as the command. tell is called for each dead letter
// acted on or skipped.
func replayDead(ctx context.Context, conn *amqp.Connection, b *browser, sel selection, r rules, tell func(note)) (tally, error) {
	var t tally
	report := func(n note) { t.add(n); tell(n) }
	ch, err := conn.Channel()
	if err == nil {
		err = topo.RequireExchange(ch, topo.Exchange)
	}
	if err != nil {
		return t, cli.Broker(err, topo.ErrMissing)
	}
	defer ch.Close()
	p, err := confirm.New(ch, replayWindow, 10*time.Second)
	if err != nil {
		return t, cli.Exit(cli.ExitUnavailable, err)
	}

	sent := map[string]bool{} // the keys replayed (or being replayed) in this run
	var batch []*dead
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		byTag := make(map[uint64]*dead, len(batch))
		for _, m := range batch {
			tag, err := p.Publish(ctx, topo.Exchange, topo.RoutingKey, copyOf(m, r.edit))
			if err != nil {
				return cli.Exit(cli.ExitUnavailable, fmt.Errorf("publish copy of %s: %w", field(m.Key), err))
			}
			byTag[tag] = m
		}
		var ok []*dead
		for range batch {
			out, err := p.Await()
			if err != nil {
				// Outcome unknown: the dead copies stay, so the worst case
				// is a duplicate.
				return cli.Exit(cli.ExitTempFail, fmt.Errorf("%w; the dead letters of this batch stay in claim.dead", err))
			}
			m := byTag[out.Tag]
			switch {
			case out.Acked:
				ok = append(ok, m)
			case out.Returned != "":
				report(note{noteRefused, m.Key, "unroutable (" + field(out.Returned) + "); run topology"})
			default:
				report(note{noteRefused, m.Key, "the broker nacked the copy"})
			}
		}
		if afterConfirm != nil {
			if err := afterConfirm(); err != nil {
				return err
			}
		}
		for _, m := range ok {
			if err := m.d.Ack(false); err != nil {
				return cli.Exit(cli.ExitUnavailable, fmt.Errorf("ack dead copy of %s (its replay is queued; the dead copy stays): %w", field(m.Key), err))
			}
			report(note{noteReplayed, m.Key, ""})
		}
		batch = batch[:0]
		return nil
	}

	err = b.walk(ctx, sel.limit, func(m *dead) (bool, error) {
		if !sel.selects(m) {
			return true, nil
		}
		switch {
		case sent[m.Key]:
			// A second copy of a claim replayed in this run (published
			// twice, or dead-lettered again already): one try per run.
			report(note{noteAgain, m.Key, ""})
			return true, nil
		case m.Known && m.Rec.Delivered() && !r.force:
			report(note{noteDelivered, m.Key, ""})
			return true, nil
		case m.Replays >= int64(r.maxReplays) && !r.force && r.edit == nil:
			// An edited claim is the fix this limit asks for.
			report(note{noteCapped, m.Key, fmt.Sprintf("replayed %d times already (-max-replays %d)", m.Replays, r.maxReplays)})
			return true, nil
		}
		sent[m.Key] = true
		batch = append(batch, m)
		if len(batch) == replayWindow {
			return true, flush()
		}
		return true, nil
	})
	if err == nil {
		err = flush()
	}
	return t, err
}

// copyOf is the message to replay: the claim as it was first published
// (or as a person edited it), without the broker's dead-letter headers,
// with the replay count, and for an edit the edit header.
func copyOf(m *dead, e *edit) amqp.Publishing {
	d := m.d
	headers := amqp.Table{}
	for k, v := range d.Headers {
		if k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			continue
		}
		headers[k] = v
	}
	headers[replayHeader] = m.Replays + 1
	body := d.Body
	if e != nil {
		sum := sha256.Sum256(d.Body)
		headers[editHeader] = amqp.Table{
			"at":              time.Now().UTC().Truncate(time.Second),
			"by":              e.by,
			"previous_sha256": hex.EncodeToString(sum[:]),
		}
		body = e.body
	}
	id := d.MessageId
	if id == "" && e != nil {
		id = e.guid // as publish sets it
	}
	return amqp.Publishing{
		Headers:       headers,
		ContentType:   d.ContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     id,
		CorrelationId: d.CorrelationId,
		Timestamp:     d.Timestamp,
		AppId:         d.AppId,
		Body:          body,
	}
}
