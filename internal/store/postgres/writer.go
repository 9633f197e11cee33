package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"eaimq/internal/claim"
	"eaimq/internal/store/group"
)

// The writer groups the outcome records of the claims this store holds
// into one transaction on a connection of its own (group commit), as the
// SQLite writer does: with P claims in flight, one COMMIT, and one WAL
// flush, carries the records of many. Each holder then releases its lock
// on its own session, after the COMMIT, so that a peer that takes the lock
// reads the record as it is now.
//
// A record is written in the group only as its holder has it in flight
// (state inflight, owner this store); anything else (a late holder's
// acceptance came first) is left to the holder, which writes it alone
// under the rules for a late holder (record).

// groupMax bounds the records in one transaction.
const groupMax = 64

// recordReq is one held claim's outcome for the writer.
type recordReq struct {
	key  string
	a    claim.Attempt
	done chan recordRes
}

// recordRes is what became of it: written in the group's committed
// transaction; or not written because the record was not as held
// (written false, err nil); or err, with sent saying whether the COMMIT
// was sent (its fate then unknown) or nothing was committed.
type recordRes struct {
	written bool
	sent    bool
	err     error
}

// writer takes every request that is waiting and commits them together.
func (s *Store) writer() {
	defer close(s.written)
	group.Commit(s.reqs, groupMax, s.commitGroup)
}

// commitGroup writes batch in one transaction, in two round trips: the
// BEGIN, its durability and every record in one pipeline, then the COMMIT.
// Nothing is committed before the second is sent, so a failure in the
// first leaves every holder free to write its record alone.
func (s *Store) commitGroup(batch []*recordReq) {
	answer := func(res recordRes) {
		for _, r := range batch {
			r.done <- res
		}
	}
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		answer(recordRes{err: err})
		return
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	b.Queue(`SET LOCAL synchronous_commit TO ` + s.syncLevel)
	for _, r := range batch {
		b.Queue(finishHeld(r.a), s.finishArgs(r.key, r.a)...)
	}
	tags, err := sendAll(ctx, conn, b)
	if err != nil {
		conn.Exec(ctx, `ROLLBACK`)
		if conn.Conn().IsClosed() {
			conn.Conn().Close(ctx) // the pool discards it on Release
		}
		answer(recordRes{err: err})
		return
	}
	if _, err := conn.Exec(ctx, `COMMIT`); err != nil {
		closeConn(conn) // whatever state it is in, it goes
		answer(recordRes{sent: true, err: err})
		return
	}
	for i, r := range batch {
		r.done <- recordRes{written: tags[i+2].RowsAffected() == 1}
	}
}

// sendAll runs b through conn and returns each statement's tag.
func sendAll(ctx context.Context, conn interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, b *pgx.Batch) ([]pgconn.CommandTag, error) {
	br := conn.SendBatch(ctx, b)
	tags := make([]pgconn.CommandTag, 0, b.Len())
	var err error
	for range b.Len() {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err != nil {
			break
		}
		tags = append(tags, tag)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tags, err
}

// group hands a held claim's outcome to the writer and waits for its
// answer.
func (s *Store) group(key string, a claim.Attempt) (res recordRes) {
	r := &recordReq{key: key, a: a, done: make(chan recordRes, 1)}
	defer func() {
		if recover() != nil { // send on the closed channel: Close was called
			res = recordRes{err: errClosed}
		}
	}()
	s.reqs <- r
	return <-r.done
}
