package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Advisory lock keys: a hash of a name, so that the schema's lock and each
// claim's are apart. Two ids whose hashes collide (2⁻⁶⁴) wait for each
// other, which costs time, never a claim.
var schemaLockKey = lockKey("eaimq/schema")

// LockKey is the advisory lock key of the claim on message_id id: the
// session holding it is the claim's holder (pg_locks shows it, with
// classid and objid its high and low 32 bits).
func LockKey(id string) int64 { return lockKey("eaimq/claim/" + id) }

func lockKey(name string) int64 {
	h := sha256.Sum256([]byte(name))
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// turn waits for this store's turn on id.
func (s *Store) turn(ctx context.Context, id string) (*pgClaim, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	c := s.claims[id]
	if c == nil {
		c = &pgClaim{turn: make(chan struct{}, 1)}
		s.claims[id] = c
	}
	c.refs++
	s.mu.Unlock()
	select {
	case c.turn <- struct{}{}:
		return c, nil
	case <-ctx.Done():
		s.mu.Lock()
		c.refs--
		// No one else uses it (refs 0), so reading conn is safe.
		if c.refs == 0 && c.conn == nil {
			delete(s.claims, id)
		}
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

// endTurn ends this operation's turn on id.
func (s *Store) endTurn(id string, c *pgClaim) {
	s.mu.Lock()
	c.refs--
	if c.refs == 0 && c.conn == nil {
		delete(s.claims, id)
	}
	s.mu.Unlock()
	<-c.turn
}

// reserve counts one more claim held, or says there are too many.
func (s *Store) reserve(c *pgClaim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held >= s.maxHeld {
		return fmt.Errorf("%d claims in progress at once, the most this store was opened for (Options.Conns)", s.held)
	}
	s.held++
	c.slot = true
	return nil
}

// letGo releases c's session, and with it the lock: unlocked and back to
// the pool when the session is well, closed otherwise (never back to the
// pool holding a lock).
func (s *Store) letGo(ctx context.Context, c *pgClaim) {
	if c.conn != nil {
		if c.unlocked {
			c.unlocked = false
		} else if _, err := c.conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
			closeConn(c.conn)
		}
		c.conn.Release()
		c.conn = nil
	}
	if c.slot {
		s.mu.Lock()
		s.held--
		s.mu.Unlock()
		c.slot = false
	}
}

// unlockAll releases every advisory lock conn's session holds, best
// effort: closing the session releases them anyway, only later.
func unlockAll(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, "SELECT pg_advisory_unlock_all()")
}

// closeConn ends conn's session (the server releases what it held); the
// pool then discards it on Release.
func closeConn(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn.Conn().Close(ctx)
}
