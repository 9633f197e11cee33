package dlq

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/broker"
	"eaimq/internal/claim"
	"eaimq/internal/fail"
	"eaimq/internal/metrics"
	"eaimq/internal/retry"
	"eaimq/internal/store"
	"eaimq/internal/store/deadletter"
	"eaimq/internal/topo"
)

// Ingestion: dlq ingest consumes claim.dead into the store's database, a
// row each (deadletter.Row), so that list and show read the database and
// the broker holds nothing for them.

// The defaults of dlq ingest's flags.
const (
	DefaultIngestBatch   = 200
	DefaultIngestMaxRows = 1_000_000
	defaultIngestWait    = 200 * time.Millisecond
	defaultIngestRetry   = 5 * time.Second
)

// IngestConfig is how dlq ingest runs.
type IngestConfig struct {
	// Batch is how many dead letters one transaction writes (and one
	// ack settles); the prefetch is twice that, so that the next batch
	// arrives while one commits.
	Batch int
	// MaxRows is the size bound: at that many rows ingestion stops
	// taking more, and claim.dead keeps the rest.
	MaxRows int64
	// Wait is how long a batch that is not full waits for more.
	Wait time.Duration
	// Retry is how often a store that failed, or a full table, is
	// looked at again.
	Retry time.Duration
	// Retention is how long a purged or replayed row is kept (the
	// archive's retention, 0: DefaultArchiveRetention); the ingester
	// prunes older ones at its start and every PruneEvery (0: an hour).
	Retention  time.Duration
	PruneEvery time.Duration
	// ArchiveQueue: take claim.dead.archive instead of claim.dead, each
	// message as a purged row, and return once the queue is empty (dlq
	// ingest -archive-queue, run once to move a deployment from the
	// archive queue to rows).
	ArchiveQueue bool
	// Metrics, when set, are reported to (dlq ingest -metrics-addr).
	Metrics *metrics.Ingest
	Hooks   IngestHooks
}

// IngestHooks are for tests: fields of the value they hook.
type IngestHooks struct {
	// Taken runs when the batch being built holds n dead letters.
	Taken func(n int)
	// AfterCommit runs after a batch's rows are committed and before its
	// messages are acked; an error stops ingestion there, as a crash
	// would: nothing of that batch is acked.
	AfterCommit func() error
	// Stopped runs when ingestion stops consuming (the store failed, or
	// the size bound), with why.
	Stopped func(why string)
}

func (c IngestConfig) withDefaults() IngestConfig {
	if c.Batch <= 0 {
		c.Batch = DefaultIngestBatch
	}
	if c.MaxRows <= 0 {
		c.MaxRows = DefaultIngestMaxRows
	}
	if c.Wait <= 0 {
		c.Wait = defaultIngestWait
	}
	if c.Retry <= 0 {
		c.Retry = defaultIngestRetry
	}
	if c.Retention <= 0 {
		c.Retention = DefaultArchiveRetention
	}
	if c.PruneEvery <= 0 {
		c.PruneEvery = time.Hour
	}
	return c
}

// DefaultArchiveRetention is how long the store keeps a purged or
// replayed dead letter, as claim.dead.archive keeps a purged one.
const DefaultArchiveRetention = topo.DefaultArchiveRetention

// prunable are the states the retention prunes: the archive (purged),
// and what was replayed (the audit trail keeps who replayed it).
var prunable = []deadletter.State{deadletter.StatePurged, deadletter.StateReplayed}

// prune deletes the rows purged or replayed longer than the retention
// ago. A failure is said and left for the next time: the rows wait.
func (in *ingester) prune(ctx context.Context) {
	n, err := in.dl.PruneDeadLetters(ctx, prunable, time.Now().Add(-in.c.Retention))
	switch {
	case err != nil:
		fmt.Fprintf(in.log, "dlq ingest: prune the rows purged or replayed over %s ago: %v (tried again in %s)\n", in.c.Retention, err, in.c.PruneEvery)
	case n > 0:
		in.rows -= n
		fmt.Fprintf(in.log, "dlq ingest: pruned %d row(s) purged or replayed over %s ago (-archive-retention)\n", n, in.c.Retention)
	}
}

// errPaused ends a session whose consumer stopped: the store failed, or
// the table is at its size bound. The session gave back what it held.
var errPaused = errors.New("ingestion paused")

// ingester is one run of dlq ingest.
type ingester struct {
	c        IngestConfig
	queue    string // claim.dead, or claim.dead.archive (ArchiveQueue)
	st       store.Store
	dl       store.DeadLetters
	log      io.Writer
	rows     int64 // in the table (the size bound's count)
	storeErr error // why the last session paused, when the store failed
}

// Ingest consumes claim.dead into st's table of dead letters until ctx
// ends (SIGTERM, SIGINT); then it finishes the batch it has, acks what it
// committed, and returns nil. Each batch is committed before its messages
// are acked, so a dead letter leaves claim.dead only once its row is in
// the database. A store that fails, or a table at c.MaxRows, stops the
// consuming and gives every message held back to claim.dead; ingestion
// resumes when the store answers again (or the table has room). The
// broker failing ends it with an error (its service manager restarts it).
func Ingest(ctx context.Context, getenv func(string) string, st store.Store, c IngestConfig, log io.Writer) error {
	dl, ok := store.DeadLettersOf(st)
	if !ok {
		return fail.Errorf(fail.IO, "the store %s has no table of dead letters", st.Path())
	}
	in := &ingester{c: c.withDefaults(), st: st, dl: dl, log: log, queue: topo.DeadQueue}
	if c.ArchiveQueue {
		in.queue = topo.ArchiveQueue
	}
	n, err := dl.CountDeadLetters(ctx, deadletter.Query{})
	if err != nil {
		return fail.Errorf(fail.IO, "count the dead letters in the store %s: %w", st.Path(), err)
	}
	in.rows = n
	in.c.Metrics.Counted(in.rows, in.c.MaxRows)
	conn, err := Dial(ctx, getenv)
	if err != nil {
		return err
	}
	defer broker.Close(conn)
	fmt.Fprintf(log, "dlq ingest: consuming %s into the store %s (%d dead letter(s) there; -max-rows %d)\n",
		in.queue, st.Path(), in.rows, in.c.MaxRows)
	in.prune(ctx)
	for {
		if in.rows >= in.c.MaxRows {
			// Said here, at start as after a session: a table full
			// before this run began is as silent as one filled now.
			in.c.Metrics.Stop(metrics.StoppedFull, true)
			in.pause(fmt.Sprintf("%d dead letter(s) in the store, at -max-rows %d: stopped taking more; %s keeps the rest "+
				"(raise -max-rows, or make room in the store)", in.rows, in.c.MaxRows, in.queue))
			if err := in.wait(ctx, in.hasRoom); err != nil {
				return nil // ctx ended while waiting: nothing held
			}
			in.c.Metrics.Stop(metrics.StoppedFull, false)
			fmt.Fprintf(log, "dlq ingest: %d dead letter(s) in the store, under -max-rows %d again; consuming %s\n",
				in.rows, in.c.MaxRows, in.queue)
		}
		err := in.session(ctx, conn)
		switch {
		case errors.Is(err, errPaused) && in.storeErr != nil:
			in.c.Metrics.Stop(metrics.StoppedStore, true)
			if in.wait(ctx, in.storeAnswers) != nil {
				return nil
			}
			in.c.Metrics.Stop(metrics.StoppedStore, false)
			fmt.Fprintf(log, "dlq ingest: the store %s answers again; consuming %s\n", st.Path(), in.queue)
			in.storeErr = nil
		case errors.Is(err, errPaused):
			// At the size bound: the loop says so and waits for room.
		default:
			return err // nil: ctx ended and the last batch is acked
		}
	}
}

// wait looks at ready every c.Retry until it returns true; an error when
// ctx ends first.
func (in *ingester) wait(ctx context.Context, ready func(context.Context) bool) error {
	t := time.NewTicker(in.c.Retry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if ready(ctx) {
				return nil
			}
		}
	}
}

func (in *ingester) storeAnswers(ctx context.Context) bool { return in.st.Ping(ctx) == nil }

func (in *ingester) hasRoom(ctx context.Context) bool {
	n, err := in.dl.CountDeadLetters(ctx, deadletter.Query{})
	if err == nil {
		in.rows = n
		in.c.Metrics.Counted(in.rows, in.c.MaxRows)
	}
	return err == nil && n < in.c.MaxRows
}

// session consumes on a channel of its own until ctx ends (nil, after the
// last batch) or it pauses (errPaused, the channel closed: every message
// not acked is back in claim.dead, and nothing is held).
func (in *ingester) session(ctx context.Context, conn *amqp.Connection) error {
	ch, ds, err := in.open(conn)
	if err != nil {
		return err
	}
	// Closing the channel gives back every delivery not acked: what a
	// pause or a failed batch must do, and harmless after the last ack.
	defer ch.Close()
	var batch []amqp.Delivery
	timer := time.NewTimer(in.c.Wait)
	defer timer.Stop()
	prune := time.NewTicker(in.c.PruneEvery)
	defer prune.Stop()
	for {
		select {
		case <-prune.C:
			// Between batches: the batch in hand waits for its timer.
			in.prune(ctx)
			continue
		case <-ctx.Done():
			// Finish the batch in hand: its rows are committed and its
			// messages acked even though ctx ended; the rest prefetched
			// go back with the channel.
			return in.flush(context.WithoutCancel(ctx), batch)
		case d, ok := <-ds:
			if !ok {
				return fail.New(fail.Unavailable, fmt.Errorf("consume %s: the broker closed the channel", in.queue))
			}
			if len(batch) == 0 {
				timer.Reset(in.c.Wait)
			}
			batch = append(batch, d)
			if in.c.Hooks.Taken != nil {
				in.c.Hooks.Taken(len(batch))
			}
			if len(batch) < in.c.Batch && int64(len(batch))+in.rows < in.c.MaxRows {
				continue
			}
		case <-timer.C:
			if len(batch) == 0 {
				if in.c.ArchiveQueue && in.emptied(ch) {
					return nil // run once: the archive queue is all in rows
				}
				if in.c.ArchiveQueue {
					timer.Reset(in.c.Wait)
				}
				continue
			}
		}
		if err := in.flush(ctx, batch); err != nil {
			return err
		}
		batch = batch[:0]
		if in.c.ArchiveQueue {
			timer.Reset(in.c.Wait) // to look again whether the queue is empty
		}
		if in.rows >= in.c.MaxRows {
			return errPaused // the channel closes: what it prefetched goes back
		}
	}
}

// open opens the session's channel, checks its queue, sets its prefetch
// and starts consuming (manual ack). The dial bounds the handshake;
// these are round trips the library does not bound, and a node that took the connection and then
// stalls (paused, or cut off from its cluster while its heartbeats go on)
// would hold dlq ingest on them for good, a service that never consumes
// and never exits. Past the dial's timeout the socket is closed under
// them, which fails the pending call, and Ingest returns the error for
// its service manager to restart it, as for a broker that failed.
func (in *ingester) open(conn *amqp.Connection) (*amqp.Channel, <-chan amqp.Delivery, error) {
	stall := time.AfterFunc(dialTimeout, func() { broker.Abort(conn, 0) })
	ch, ds, err := in.openChannel(conn)
	if !stall.Stop() {
		if ch != nil {
			ch.Close()
		}
		return nil, nil, fail.Errorf(fail.Unavailable, "the broker took the connection but did not open the session within %s: "+
			"a node paused or cut off from its cluster does this", dialTimeout)
	}
	return ch, ds, err
}

func (in *ingester) openChannel(conn *amqp.Connection) (*amqp.Channel, <-chan amqp.Delivery, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, fail.New(fail.Unavailable, fmt.Errorf("open a channel: %w", err))
	}
	if err := topo.RequireQueue(ch, in.queue); err != nil {
		ch.Close()
		return nil, nil, fail.Broker(err, topo.ErrMissing)
	}
	if err := ch.Qos(2*in.c.Batch, 0, false); err != nil {
		ch.Close()
		return nil, nil, fail.New(fail.Unavailable, fmt.Errorf("basic.qos: %w", err))
	}
	ds, err := ch.Consume(in.queue, "dlq-ingest", false /* autoAck: never */, false, false, false, nil)
	if err != nil {
		ch.Close()
		return nil, nil, fail.New(fail.Unavailable, fmt.Errorf("consume %s: %w", in.queue, err))
	}
	return ch, ds, nil
}

// flush commits batch's rows, then acks its messages.
func (in *ingester) flush(ctx context.Context, batch []amqp.Delivery) error {
	if len(batch) == 0 {
		return nil
	}
	rows, err := in.rowsOf(ctx, batch)
	if err == nil {
		err = in.put(ctx, rows)
	}
	if err != nil {
		// Nothing of the batch is acked: the channel closes and gives
		// it back, and nothing more is taken until the store answers.
		in.storeErr = err
		in.pause(fmt.Sprintf("the store %s failed (%v): stopped consuming, %d dead letter(s) given back to %s, nothing held; "+
			"retrying every %s", in.st.Path(), err, len(batch), in.queue, in.c.Retry))
		return errPaused
	}
	if h := in.c.Hooks.AfterCommit; h != nil {
		if err := h(); err != nil {
			return err
		}
	}
	// One ack for the batch, multiple up to its last tag: the batch is
	// every delivery this channel has not acked up to that tag (the
	// broker numbers them in order, and every earlier batch is acked),
	// and all of them are in the database now. Acking after the commit
	// is what makes ingestion at least once: a crash between the two
	// redelivers the batch, and copyKey finds its rows.
	if err := batch[len(batch)-1].Ack(true /* multiple */); err != nil {
		return fail.New(fail.Unavailable, fmt.Errorf("ack %d dead letter(s) (their rows are in the store; they will be delivered again and recognised): %w", len(batch), err))
	}
	return nil
}

// put writes rows in one transaction. When that fails and the store
// answers a probe, it is not the store but a row it refuses: then each
// row is written alone, and one refused is written again as its body and
// why, flagged raw, so that one such message never stops the rest (it
// would come back in every batch).
func (in *ingester) put(ctx context.Context, rows []deadletter.Row) error {
	before := in.rows
	defer func() { in.c.Metrics.Counted(in.rows, in.c.MaxRows) }()
	added, err := in.dl.PutDeadLetters(ctx, rows)
	in.rows += int64(added)
	if err == nil {
		in.c.Metrics.Batch(added, len(rows))
		return nil
	}
	if len(rows) == 0 || in.st.Ping(ctx) != nil {
		return err
	}
	for _, r := range rows {
		added, err := in.dl.PutDeadLetters(ctx, []deadletter.Row{r})
		if err != nil {
			r = deadletter.Row{CopyKey: r.CopyKey, MessageID: r.MessageID, Reason: claim.ReasonUnknown.String(), Body: r.Body,
				Properties: []byte(`{"table":{}}`), Headers: []byte(`{"table":{}}`), IngestedAt: r.IngestedAt,
				Raw: "the store refused the row as read (" + err.Error() + "); kept: the body"}
			added, err = in.dl.PutDeadLetters(ctx, []deadletter.Row{r})
		}
		if err != nil {
			return err
		}
		in.rows += int64(added)
	}
	in.c.Metrics.Batch(int(in.rows-before), len(rows))
	return nil
}

func (in *ingester) pause(why string) {
	fmt.Fprintf(in.log, "dlq ingest: %s\n", why)
	if in.c.Hooks.Stopped != nil {
		in.c.Hooks.Stopped(why)
	}
}

// rowsOf makes the rows of a batch, with what the consumer recorded of
// each claim (one read of the store for the batch).
func (in *ingester) rowsOf(ctx context.Context, batch []amqp.Delivery) ([]deadletter.Row, error) {
	ms := make([]*dead, len(batch))
	keys := make([]string, len(batch))
	for i, d := range batch {
		ms[i] = parse(d, false)
		keys[i] = ms[i].Key
	}
	recs, err := in.st.Records(ctx, keys)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	rows := make([]deadletter.Row, len(batch))
	for i, m := range ms {
		m.Rec, m.Known = recs[m.Key]
		rows[i] = rowOf(m, now)
		if in.c.ArchiveQueue {
			rows[i] = purgedRow(rows[i], m, now)
		}
	}
	return rows, nil
}

// purgedRow is a message of claim.dead.archive as a row of the store's
// archive: purged, by whom, through what and when its purge header says
// (when it has none, now: its retention starts over).
func purgedRow(r deadletter.Row, m *dead, now time.Time) deadletter.Row {
	r.State, r.StateAt, r.StateVia = deadletter.StatePurged, now, "dlq ingest -archive-queue"
	if p := m.Purged; p != nil {
		r.StateBy, r.StateVia = p.By, p.Via
		if !p.At.IsZero() {
			r.StateAt = p.At
		}
	}
	return r
}

// emptied says whether the queue has nothing left, ready or unacked by
// this channel: the batch in hand is empty, so everything delivered to
// it is acked.
func (in *ingester) emptied(ch *amqp.Channel) bool {
	q, err := ch.QueueDeclarePassive(in.queue, true, false, false, false, nil)
	return err == nil && q.Messages == 0
}

// rowOf is dead letter m as a row. A message that cannot be read whole
// (headers of a type the table cannot keep, a body that is not a JSON
// object) is kept as it came, with why in Raw: it never stops the rest.
func rowOf(m *dead, now time.Time) deadletter.Row {
	d := m.d
	r := deadletter.Row{CopyKey: copyKey(m), MessageID: m.Key, ClaimID: m.ClaimID, GUID: m.guid,
		Reason: m.Reason().String(), DeadAt: m.DeadAt, BrokerReason: m.Broker, Body: d.Body, IngestedAt: now}
	if r.Body == nil {
		r.Body = []byte{}
	}
	if m.Known {
		r.Status, r.Answer, r.Attempts = m.Rec.LastStatus, m.Rec.LastError, m.Rec.Attempts
		r.Record, _ = json.Marshal(m.Rec)
	}
	var why []string
	var err error
	if r.Headers, err = encodeTable(d.Headers); err != nil {
		why = append(why, "headers: "+err.Error())
		r.Headers = []byte(`{"table":{}}`)
	}
	if r.Properties, err = encodeTable(properties(d)); err != nil {
		why = append(why, "properties: "+err.Error())
		r.Properties = []byte(`{"table":{}}`)
	}
	if !m.object {
		why = append(why, "the body is not a JSON object")
	}
	for i, w := range why {
		if i > 0 {
			r.Raw += "; "
		}
		r.Raw += w
	}
	return r
}

func guidOf(body []byte) string {
	var peek struct {
		Guid string `json:"guid"`
	}
	json.Unmarshal(body, &peek)
	return peek.Guid
}

// copyKey says which dead-lettered copy m is. The same copy delivered
// again (after a crash between commit and ack), or dead-lettered twice by
// the broker's at-least-once dead-lettering, carries the same message,
// headers and body, so it has the same key and stays one row. A claim
// dead-lettered again later is another dead letter, with its own key: its
// x-death count or time differs, or it is another copy (x-eaimq-copy) or
// another replay (x-eaimq-replays). x-delivery-count is left out: a
// quorum claim.dead raises it on every delivery of the same copy.
func copyKey(m *dead) string {
	h := sha256.New()
	field := func(s string) { h.Write([]byte(strconv.Itoa(len(s)) + ":" + s)) }
	field(m.Key)
	field(m.d.MessageId)
	tok, _ := m.d.Headers[retry.TokenHeader].(string)
	field(tok)
	field(strconv.FormatInt(m.Replays, 10))
	if deaths, ok := m.d.Headers["x-death"].([]any); ok {
		for _, x := range deaths {
			if t, ok := x.(amqp.Table); ok {
				q, _ := t["queue"].(string)
				r, _ := t["reason"].(string)
				c, _ := t["count"].(int64)
				at, _ := t["time"].(time.Time)
				field(q + "\x00" + r + "\x00" + strconv.FormatInt(c, 10) + "\x00" + strconv.FormatInt(at.Unix(), 10))
			}
		}
	}
	b := sha256.Sum256(m.d.Body)
	h.Write(b[:])
	return "copy:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// deadOfRow is an ingested row as the one model of a dead letter: the
// message it was in claim.dead, and the record the consumer had of it
// when it was ingested.
func deadOfRow(r deadletter.Row) *dead {
	d := amqp.Delivery{Body: r.Body}
	if t, err := decodeTyped(r.Headers); err == nil {
		d.Headers = t
	}
	if t, err := decodeTyped(r.Properties); err == nil {
		withProperties(&d, t)
	}
	return withRow(rowDead(d, r), &r)
}

// deadOfRowLean is deadOfRow for a row read without its properties and
// body (deadletter.Query.Lean), for a walk that reads only the fields of
// the model (list: its table and its JSON rows), not the message: the
// fields are the same, the message (Delivery) has neither headers nor
// properties nor body. Nil when the row needs its body read (rowDead: a
// claim_id that may be PostgreSQL's stand-in) or its headers do not read
// so: then the caller reads the whole row.
//
// m.row is r itself, in the caller's page of rows, not a copy of it (an
// allocation of each row's 300 bytes): a lean walk holds no dead letter
// past its page.
func deadOfRowLean(r *deadletter.Row, lt *leanTables) *dead {
	if strings.ContainsRune(r.ClaimID, utf8.RuneError) {
		return nil
	}
	h, err := lt.decodeHeadersLean(r.Headers)
	if err != nil {
		return nil
	}
	m := &dead{d: amqp.Delivery{Headers: h}, Key: r.MessageID, ClaimID: r.ClaimID}
	parseHeaders(m)
	m.d.Headers = nil // a few of them only, and lt's: none rather than a wrong table
	return withRow(m, r)
}

// withRow is m with what its row says beyond the message: the record and
// the state.
func withRow(m *dead, r *deadletter.Row) *dead {
	if r.Record != nil && json.Unmarshal(r.Record, &m.Rec) == nil {
		m.Known = true
	}
	m.row = r
	switch r.State {
	case deadletter.StatePurged:
		// The archive's: purged by the row's state, as the archive
		// queue's message says it by its header.
		m.Purged = &Purged{At: r.StateAt, By: r.StateBy, Via: r.StateVia}
	case deadletter.StateReplaying:
		m.Replaying = &Purged{At: r.StateAt, By: r.StateBy, Via: r.StateVia}
	}
	return m
}
