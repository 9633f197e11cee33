package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
)

// request is one write for the writer goroutine.
type request struct {
	fn      func(tx *sql.Tx) error
	durable bool // must survive a power loss before the caller goes on
	done    chan error
}

// writer is the only goroutine that writes. It takes every request that is
// waiting and commits them in one transaction (group commit): with P
// deliveries in flight, one commit carries the records of many.
//
// Durability: SQLite commits with synchronous=NORMAL (WAL frames written,
// not fsynced), and for the durable requests of a batch the writer then
// fdatasyncs the WAL itself before it answers them. An in-progress claim
// (not durable: a lease lost to a power cut is harmless, its holder died
// with it) is answered at its commit. Whatever arrives while the fsync
// runs waits for it and goes into the next batch, so one fsync covers
// every record committed while the previous one ran.
//
// The fsync is the writer's own, in line, rather than handed to syncer
// goroutines that overlap it with the next commit (the design before). On
// two shared cores next to the broker and the partner, the overlapped
// fsyncs made none finish sooner (the device flushes them one after the
// other) and each covered fewer records: in line, a drain needs fewer
// fsyncs per claim for the same CPU, and runs faster. Benchmarked alone,
// with nothing else on the cores, the store is slower in line, since
// there overlapping costs nothing. (The measurements are in
// docs/figures.md.)
//
// What the writer's own fsync buys over SQLite's synchronous=FULL (which
// would fsync every commit, in-progress rows included): the rows
// "no-wal-sync" of the ablation table in docs/figures.md.
func (s *Store) writer() {
	defer close(s.stopped)
	groupCommit(s.reqs, 128, s.commit)
}

// commit runs batch in one transaction, makes its durable requests
// durable, and answers every request.
func (s *Store) commit(batch []*request) {
	if err := s.runTx(batch); err != nil && len(batch) > 1 {
		// One request failed and took the batch with it: run each alone,
		// so that the others are not punished for it.
		for _, r := range batch {
			s.commit([]*request{r})
		}
		return
	} else if err != nil {
		batch[0].done <- err
		return
	}
	var durable []*request
	for _, r := range batch {
		if r.durable && s.walSync {
			durable = append(durable, r)
		} else {
			r.done <- nil
		}
	}
	if len(durable) == 0 {
		return
	}
	// This fsync starts after the batch's commit, so it covers it.
	err := s.syncWAL()
	for _, r := range durable {
		r.done <- err
	}
}

// syncWAL fsyncs the WAL file. fsync works on the file, not the descriptor,
// so our own read-only descriptor flushes what SQLite wrote through its own.
func (s *Store) syncWAL() error {
	wal, err := s.walFile()
	if err != nil {
		return err
	}
	if err := datasync(wal); err != nil {
		return fmt.Errorf("fdatasync WAL: %w", err)
	}
	return nil
}

// walFile opens the WAL for fsync, once.
func (s *Store) walFile() (*os.File, error) {
	s.walMu.Lock()
	defer s.walMu.Unlock()
	if s.wal == nil {
		f, err := os.Open(s.file + "-wal")
		if err != nil {
			return nil, fmt.Errorf("open WAL for fsync: %w", err)
		}
		// The WAL file may be new: make its directory entry durable too,
		// once, or a power cut could take the whole file with it.
		if d, err := os.Open(filepath.Dir(s.file)); err == nil {
			d.Sync()
			d.Close()
		}
		s.wal = f
	}
	return s.wal, nil
}

func (s *Store) runTx(batch []*request) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	for _, r := range batch {
		if err := r.fn(tx); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// write runs fn in the writer's next transaction and waits for the commit.
func (s *Store) write(ctx context.Context, durable bool, fn func(tx *sql.Tx) error) (err error) {
	if s.readOnly {
		return errReadOnly
	}
	r := &request{fn: fn, durable: durable, done: make(chan error, 1)}
	defer func() {
		if recover() != nil { // send on the closed channel: Close was called
			err = errClosed
		}
	}()
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once queued, wait for the commit even if ctx ends: the caller must
	// know whether its record is in the file before it acks or not.
	return <-r.done
}

// groupCommit is the writer goroutine's loop (group commit): it calls
// commit with each batch of the requests that arrive on reqs,
// at most max at a time: the first one it waits for, then every one that
// is already waiting. It returns when reqs is closed and drained.
func groupCommit[T any](reqs <-chan T, max int, commit func([]T)) {
	batch := make([]T, 0, max)
	for r := range reqs {
		batch = append(batch[:0], r)
	more:
		for len(batch) < max {
			select {
			case r, ok := <-reqs:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		commit(batch)
	}
}
