package sqlite

import (
	"context"
	"database/sql"
	"eaimq/internal/claim"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Solo mode: one store write per claim when no other process shares the
// SQLite file.
//
// The in-progress row that Begin writes of an id never seen exists only
// to tell another process sharing the file that this one is calling the
// partner with that id. When no other process has the file open for
// writing, nobody reads it: such claims can live in memory (held), Begin
// only reads the record, and Finish writes it in one statement. That
// halves the transactions per claim and takes Begin out of the writer's
// queue. (A claim with a record is taken with its row written, as when
// the file is shared: see soloBegin.)
//
// Who shares the file is known from a lock file beside it (<file>-lock),
// with open-file-description locks (Linux), two bytes:
//
//	byte 0  the holders: a solo store holds it exclusively, every other
//	        writer shared;
//	byte 1  the joiners: a store that wants to share the file holds it
//	        shared from the moment it asks.
//
// A store that gets byte 0 exclusively at Open is solo. Any other takes
// byte 1, then waits for byte 0 shared. The solo store looks at byte 1
// every soloPoll; when someone holds it, it writes every claim it holds as
// an in-progress row (committed), then turns its lock on byte 0 into a
// shared one, atomically, and from then on works as every sharer does (rows
// for claims in progress). So the newcomer's first Begin runs after the
// rows it must see are in the file, and no third store can take byte 0
// exclusively in between. The locks go with the process: a solo store
// killed with -9 leaves nothing held, and its claims, unacked, come back
// to the next consumer as redeliveries.
//
// Files of SchemaVersion 3 and later are only written by stores that keep
// this protocol: an older program refuses a newer schema, so it cannot
// share a file with a solo store and write rows nobody reads.
//
// What it buys: the rows "no-solo" of the ablation table in
// docs/figures.md (the consumer's CPU at prefetch 5 and 50, and the
// store's, with every claim's row written as when shared).
type solo struct {
	lock *os.File // <file>-lock, held for the store's life (nil: never solo)

	mu sync.RWMutex // read: a solo Begin, Finish or Get; write: leaving solo mode
	on bool         // under mu: claims in progress are in held, not in rows

	heldMu sync.Mutex
	held   map[string]heldClaim // the claims in progress, while on

	stop    chan struct{} // ends the watcher
	stopped chan struct{}
}

// heldClaim is what Begin decided for a claim held in memory, for Finish
// to write and for a switch to shared mode to write down.
type heldClaim struct {
	claimID    string
	failures   int   // transient failures of the current copy, before this call
	leaseUntil int64 // unix ms, as Begin would have written it
	restart    bool  // the lineage starts over (claim.Begun.Restart)
}

// errNoOFDLocks: the system has no open-file-description locks.
var errNoOFDLocks = errors.New("no open file description locks")

// soloPoll is how often a solo store looks for a store that wants to join:
// the longest a second consumer's Open waits for the first to write down
// its claims.
const soloPoll = 50 * time.Millisecond

// joinTimeout bounds that wait: a solo holder that does not answer (stopped,
// or its disk failing) makes Open fail rather than hang.
const joinTimeout = 30 * time.Second

// openSolo takes the store's place in the lock file: solo when it is
// alone, else a sharer once the solo store (if any) has let go.
func (s *Store) openSolo() error {
	f, err := os.OpenFile(s.file+"-lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open the lock file beside it: %w", err)
	}
	ok, err := false, error(nil) // Ablation.NoSolo: join, as if another store were here
	if !s.ablation.NoSolo {
		ok, err = lockRange(f, 0, true, false)
	}
	switch {
	case errors.Is(err, errNoOFDLocks):
		f.Close() // never solo on this system: every store writes its rows
		return nil
	case err != nil:
		f.Close()
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	case ok:
		s.solo = solo{lock: f, on: true, held: map[string]heldClaim{}, stop: make(chan struct{}), stopped: make(chan struct{})}
		if !s.ablation.NoKnown {
			s.startKnown()
		}
		go s.watchJoiners()
		return nil
	}
	// Another store is here: ask to join, then wait until it has let go.
	if _, err := lockRange(f, 1, false, true); err != nil {
		f.Close()
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	deadline := time.Now().Add(joinTimeout)
	for {
		ok, err := lockRange(f, 0, false, false)
		if err != nil {
			f.Close()
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if ok {
			s.solo = solo{lock: f}
			return nil
		}
		if time.Now().After(deadline) {
			f.Close()
			return fmt.Errorf("another consumer holds %s and did not let this one share the file within %s", f.Name(), joinTimeout)
		}
		time.Sleep(soloPoll / 5)
	}
}

// watchJoiners leaves solo mode as soon as another store asks to join.
func (s *Store) watchJoiners() {
	defer close(s.solo.stopped)
	t := time.NewTicker(soloPoll)
	defer t.Stop()
	for {
		select {
		case <-s.solo.stop:
			return
		case <-t.C:
		}
		if waiting, err := lockedByOther(s.solo.lock, 1); err != nil || !waiting {
			continue
		}
		if err := s.share(); err == nil {
			return
		}
		// The rows could not be written: stay solo (the joiner waits, and
		// fails after joinTimeout) and try again at the next tick.
	}
}

// share writes every claim held in memory as an in-progress row, then
// turns the exclusive lock into a shared one: from here on this store
// works as every sharer does.
func (s *Store) share() error {
	s.solo.mu.Lock()
	defer s.solo.mu.Unlock()
	s.solo.heldMu.Lock()
	held := s.solo.held
	s.solo.heldMu.Unlock()
	if len(held) > 0 {
		now := nowMS()
		err := s.write(context.Background(), false, func(tx *sql.Tx) error {
			for id, c := range held {
				if _, err := tx.Stmt(s.stmts.writeDown).Exec(id, s.owner, c.leaseUntil, c.failures, nullable(c.claimID), now, c.restart); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	// Atomic: no moment without a lock on byte 0 for a third store to
	// take exclusively.
	if _, err := lockRange(s.solo.lock, 0, false, false); err != nil {
		return err
	}
	s.solo.on = false
	s.solo.held = nil
	return nil
}

// closeSolo stops the watcher and releases the lock file.
func (s *Store) closeSolo() {
	if s.solo.stop != nil {
		close(s.solo.stop)
		<-s.solo.stopped
	}
	if s.solo.lock != nil {
		s.solo.lock.Close()
	}
}

// soloBegin is Begin in solo mode: it reads the record and holds the claim
// in memory. ok is false when the store is not solo (any more).
func (s *Store) soloBegin(ctx context.Context, id string, c claim.Copy, lease time.Duration) (b claim.Begun, ok bool, err error) {
	s.solo.mu.RLock()
	defer s.solo.mu.RUnlock()
	if !s.solo.on {
		return claim.Begun{}, false, nil
	}
	now := nowMS()
	// A record in flight for another live holder: only a store that broke
	// the lock protocol could have written it (one that shares the file
	// over a network filesystem), and claim.Begin respects it.
	f, err := claim.Found{}, sql.ErrNoRows
	if !s.known.absent(id) {
		f, err = s.found(s.reads.selectClaim.QueryRowContext(ctx, id), now)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		f = claim.Found{}
	case err != nil:
		return claim.Begun{}, true, err
	}
	if b = claim.Begin(f, c); b.Result != claim.Acquired {
		return b, true, nil
	}
	if f.State != claim.StateNone {
		// A record exists: take it as a shared store does, with its
		// in-progress row written (ok false: Begin goes on). Held only in
		// memory, a consumer that dies before its Finish would leave the
		// record as it was before this Begin, and claim.Start says
		// otherwise: a replay of a dead claim would be rejected again
		// without a call (DeadBefore), a republished claim's restarted
		// lineage would come back and ack its redelivered copy unsent
		// (StepDone), a fresh copy would lose the retry its count reset
		// gave it. Only a claim never seen, the common case, stays a
		// read: there the record before Begin is none, as after a crash.
		return claim.Begun{}, false, nil
	}
	s.solo.heldMu.Lock()
	s.solo.held[id] = heldClaim{claimID: c.ClaimID, failures: b.Failures, leaseUntil: now + lease.Milliseconds(), restart: b.Restart}
	s.solo.heldMu.Unlock()
	return b, true, nil
}

// soloFinish is Finish in solo mode: the record in one statement, whether
// the claim was held (Begin) or not (an outcome decided without a call).
// ok is false when the store is not solo (any more).
func (s *Store) soloFinish(ctx context.Context, id string, a claim.Attempt, state claim.State) (out claim.Outcome, ok bool, err error) {
	s.solo.mu.RLock()
	defer s.solo.mu.RUnlock()
	if !s.solo.on {
		return a.Outcome, false, nil
	}
	s.solo.heldMu.Lock()
	c, held := s.solo.held[id]
	s.solo.heldMu.Unlock()
	// failures: the count Begin read (0 for a fresh copy) when held, else
	// the one on record.
	var base, claimID any
	if held {
		base, claimID = c.failures, nullable(c.claimID)
	}
	restart := held && c.restart
	called, failed := a.Counts()
	// In the filter before the row can be in the file (see known).
	s.known.add(id)
	s.known.finished()
	err = s.write(ctx, true, func(tx *sql.Tx) error {
		out = a.Outcome
		now := nowMS()
		r, err := tx.Stmt(s.stmts.upsert).Exec(id, state.String(), claimID, called, base, failed, a.Status, nullable(a.Error),
			a.Outcome.Reason.String(), nullable(a.Detail), now, doneAt(state, now), a.Lineage, restart, a.Token, held, s.owner)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 0 {
			// Done already, or in flight for another holder: count the
			// call, keep the record (claim.Finish).
			if out, err = s.notFinished(tx, id, a, state, now); err != nil {
				return err
			}
		}
		return s.logAttempt(tx, id, a, out)
	})
	if err == nil && held {
		s.solo.heldMu.Lock()
		delete(s.solo.held, id)
		s.solo.heldMu.Unlock()
	}
	return out, true, err
}

// soloHeld reports the claim id holds in memory, for Get.
func (s *Store) soloHeld(id string) (heldClaim, bool) {
	s.solo.mu.RLock()
	defer s.solo.mu.RUnlock()
	if !s.solo.on {
		return heldClaim{}, false
	}
	s.solo.heldMu.Lock()
	defer s.solo.heldMu.Unlock()
	c, ok := s.solo.held[id]
	return c, ok
}

// isSolo reports whether the store is in solo mode now.
func (s *Store) isSolo() bool {
	s.solo.mu.RLock()
	defer s.solo.mu.RUnlock()
	return s.solo.on
}
