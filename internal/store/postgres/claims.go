package postgres

import (
	"context"
	"eaimq/internal/claim"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Begin takes message id in progress for this store, unless it is done
// already, dead-lettered before (for a redelivered copy), the step of copy
// cp was carried out already, or another session holds it: see the Store
// interface, and the package comment for the lock. The lease is not used.
func (s *Store) Begin(ctx context.Context, id string, cp claim.Copy, _ time.Duration) (claim.Begun, error) {
	if s.readOnly {
		return claim.Begun{}, errReadOnly
	}
	c, err := s.turn(ctx, id)
	if err != nil {
		return claim.Begun{}, err
	}
	defer s.endTurn(id, c)

	if c.conn != nil {
		// This store holds it already: the lock is its own.
		b, err := s.take(ctx, c.conn, id, cp)
		switch {
		case err == nil:
			if b.Result != claim.Acquired {
				s.letGo(ctx, c)
			}
			return b, nil
		case !c.conn.Conn().IsClosed():
			return claim.Begun{}, err
		}
		// Its session ended, and the lock with it: take it anew.
		s.letGo(ctx, c)
	}

	if err := s.reserve(c); err != nil {
		return claim.Begun{}, err
	}
	var isNew bool // the record is new: lockAndInsert inserted it
	for try := 0; ; try++ {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			s.letGo(ctx, c)
			return claim.Begun{}, err
		}
		c.conn = conn
		locked, inserted, err := s.lockAndInsert(ctx, conn, id, cp.ClaimID)
		if err != nil {
			// A session that died while idle in the pool: try once more
			// on another. Any other failure ends the session, so that no
			// lock it may have taken survives.
			dead := conn.Conn().IsClosed()
			closeConn(conn)
			conn.Release()
			c.conn = nil
			if dead && try == 0 {
				continue
			}
			s.letGo(ctx, c)
			return claim.Begun{}, err
		}
		if !locked {
			b, err := s.heldByPeer(ctx, conn, id, cp)
			conn.Release()
			c.conn = nil
			s.letGo(ctx, c)
			return b, err
		}
		isNew = inserted
		break
	}
	if isNew {
		return claim.Begin(claim.Found{}, cp), nil
	}
	b, err := s.takeExisting(ctx, c.conn, id, cp)
	if err != nil {
		closeConn(c.conn)
		s.letGo(ctx, c)
		return claim.Begun{}, err
	}
	if b.Result != claim.Acquired {
		s.letGo(ctx, c)
	}
	return b, nil
}

// take reads and takes the record of id, the lock being held by conn, as
// claim.Begin decides from what the record says. With the lock held no
// other holder is in flight with it (HeldElsewhere is false), but a late
// holder, whose session and lock are gone, may still record its outcome
// without the lock: the record is taken only as it was read, and read
// again if it changed meanwhile.
func (s *Store) take(ctx context.Context, conn *pgxpool.Conn, id string, cp claim.Copy) (claim.Begun, error) {
	// The common case, an id never seen, in one statement.
	tag, err := conn.Exec(ctx, claim.SQL(`INSERT INTO claims (message_id, state, owner, claim_id, updated_at)
		VALUES ($1, {inflight}, $2, $3, now()) ON CONFLICT (message_id) DO NOTHING`), pgKey(id), s.owner, pgNullText(cp.ClaimID))
	if err != nil {
		return claim.Begun{}, err
	}
	if tag.RowsAffected() == 1 {
		return claim.Begin(claim.Found{}, cp), nil
	}
	return s.takeExisting(ctx, conn, id, cp)
}

// heldByPeer is Begin of a claim whose lock another session holds: a
// live holder has it in flight (HeldElsewhere). claim.Begin still decides
// on the record, since a copy of a step carried out is acked without
// waiting for that holder (StepDone), as on SQLite. Whatever else it
// decides is Busy: without the lock, this store takes nothing (the
// holder may have committed its outcome and not yet let go of the lock,
// so the record may read as free).
func (s *Store) heldByPeer(ctx context.Context, conn *pgxpool.Conn, id string, cp claim.Copy) (claim.Begun, error) {
	var state string
	var reason *string
	var f claim.Found
	err := conn.QueryRow(ctx, `SELECT state, reason, failures, lineage, dead_token FROM claims WHERE message_id = $1`, pgKey(id)).
		Scan(&state, &reason, &f.Failures, &f.Lineage, &f.DeadToken)
	if errors.Is(err, pgx.ErrNoRows) {
		return claim.Begun{Result: claim.Busy}, nil // its Begin has not committed the record yet
	}
	if err != nil {
		return claim.Begun{}, err
	}
	f.State, f.Reason, f.HeldElsewhere = claim.ParseState(state), claim.StoredReason(deref(reason)), true
	if b := claim.Begin(f, cp); b.Result != claim.Acquired {
		return b, nil
	}
	return claim.Begun{Result: claim.Busy}, nil
}

// lockAndInsert takes id's advisory lock for conn's session and, when it
// gets it, inserts the in-progress record of an id never seen: the
// common case of Begin in one round trip. The insert needs no snapshot
// taken after the lock (the reason take reads in a statement of its
// own): ON CONFLICT sees the newest committed row, whatever the snapshot.
func (s *Store) lockAndInsert(ctx context.Context, conn *pgxpool.Conn, id, claimID string) (locked, inserted bool, err error) {
	err = conn.QueryRow(ctx, claim.SQL(`WITH l AS (SELECT pg_try_advisory_lock($1) AS ok),
		n AS (INSERT INTO claims (message_id, state, owner, claim_id, updated_at)
			SELECT $2, {inflight}, $3, $4, now() FROM l WHERE l.ok
			ON CONFLICT (message_id) DO NOTHING RETURNING 1)
		SELECT l.ok, EXISTS (SELECT 1 FROM n) FROM l`), LockKey(id), pgKey(id), s.owner, pgNullText(claimID)).Scan(&locked, &inserted)
	return locked, inserted, err
}

// takeExisting reads and takes the record of id that exists already, the
// lock being held by conn (see take).
func (s *Store) takeExisting(ctx context.Context, conn *pgxpool.Conn, id string, cp claim.Copy) (claim.Begun, error) {
	key := pgKey(id)
	for {
		var state string
		var reason, owner *string
		var r claim.Stored
		if err := conn.QueryRow(ctx, `SELECT state, reason, failures, lineage, dead_token, owner FROM claims WHERE message_id = $1`, key).
			Scan(&state, &reason, &r.Failures, &r.Lineage, &r.DeadToken, &owner); err != nil {
			return claim.Begun{}, err
		}
		r.State, r.Reason, r.Holder = claim.ParseState(state), claim.StoredReason(deref(reason)), deref(owner)
		// Our session holds the claim's lock: a holder named on the record
		// lost its lock with its session, so it is not live.
		f := r.Found(claim.HeldElsewhere(r, claim.Holding{Holder: s.owner}, false))
		b := claim.Begin(f, cp)
		if b.Result != claim.Acquired {
			return b, nil
		}
		// A first try of a fresh copy (Restart) starts the lineage over.
		tag, err := conn.Exec(ctx, claim.SQL(`UPDATE claims SET state = {inflight}, owner = $2, failures = $3,
			claim_id = COALESCE($4, claim_id), updated_at = now(), lineage = CASE WHEN $8 THEN 0 ELSE lineage END
			WHERE message_id = $1 AND state = $5 AND failures = $6 AND lineage = $7`),
			key, s.owner, b.Failures, pgNullText(cp.ClaimID), state, f.Failures, f.Lineage, b.Restart)
		if err != nil {
			return claim.Begun{}, err
		}
		if tag.RowsAffected() == 1 {
			return b, nil
		}
	}
}
