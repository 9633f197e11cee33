package postgres

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"eaimq/internal/claim"
	"eaimq/internal/pgtest"
)

// commitProbe adds to the store at loc a trigger that runs at the COMMIT
// of every transaction that writes a record (a deferred constraint
// trigger): it notes the transaction's synchronous_commit in
// zz_commit_levels, and makes each COMMIT take 300 ms, so that a peer that
// could take the claim's lock before the COMMIT ends would do so then.
func commitProbe(t *testing.T, s *Store) {
	t.Helper()
	_, err := s.pool.Exec(ctx, `
	CREATE TABLE zz_commit_levels (level text NOT NULL);
	CREATE FUNCTION zz_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO zz_commit_levels VALUES (current_setting('synchronous_commit'));
		PERFORM pg_sleep(0.3);
		RETURN NULL;
	END $$;
	CREATE CONSTRAINT TRIGGER zz_at_commit AFTER UPDATE ON claims
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION zz_at_commit();`)
	if err != nil {
		t.Fatal(err)
	}
}

// refuseOnce adds to the store at loc a trigger that makes the server
// refuse the next update of a record (an ERROR), once; zz_updates counts
// the updates tried.
func refuseOnce(t *testing.T, s *Store) {
	t.Helper()
	_, err := s.pool.Exec(ctx, `
	CREATE SEQUENCE zz_updates; -- counts across rollbacks
	CREATE FUNCTION zz_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF nextval('zz_updates') = 1 THEN
			RAISE EXCEPTION 'zz: record refused';
		END IF;
		RETURN NEW;
	END $$;
	CREATE TRIGGER zz_refuse BEFORE UPDATE ON claims FOR EACH ROW EXECUTE FUNCTION zz_refuse();`)
	if err != nil {
		t.Fatal(err)
	}
}

// peerWaits starts a peer session blocked on the claim's lock of id (as a
// second consumer's would be, were it to wait rather than try) and returns
// what it reads of the record in the statement after it gets the lock.
func peerWaits(t *testing.T, loc, id string) <-chan string {
	t.Helper()
	peer, err := pgx.Connect(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close(ctx) })
	pid := peer.PgConn().PID()
	read := make(chan string, 1)
	go func() {
		var state string
		if _, err := peer.Exec(ctx, `SELECT pg_advisory_lock($1)`, LockKey(id)); err != nil {
			read <- "error: " + err.Error()
			return
		}
		if err := peer.QueryRow(ctx, `SELECT state FROM claims WHERE message_id = $1`, id).Scan(&state); err != nil {
			state = "error: " + err.Error()
		}
		read <- state
	}()
	// Wait until the peer is queued on the lock.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var waiting bool
		if err := peerCheck(loc, pid, &waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return read
		}
		if time.Now().After(deadline) {
			t.Fatal("the peer never waited for the lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func peerCheck(loc string, pid uint32, waiting *bool) error {
	c, err := pgx.Connect(ctx, loc)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND NOT granted)`, int64(pid)).Scan(waiting)
}

// TestPostgresFinishUnlocksAfterDurableCommit: Finish releases a held
// claim only once its record is committed, and commits it with the
// outcome's durability (synchronous_commit on for "full"), while Begin's
// in-flight record is committed with it off. A peer waiting on the lock
// while the COMMIT takes 300 ms reads the record as done when it gets it.
func TestPostgresFinishUnlocksAfterDurableCommit(t *testing.T) {
	loc := pgtest.New(t)
	s := openStore(t, loc, Options{})
	beginHeld(t, s)
	commitProbe(t, s)
	finishSeen(t, s, loc)
	rows, _ := s.pool.Query(ctx, `SELECT level FROM zz_commit_levels`)
	levels, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(levels) != 1 || levels[0] != "on" {
		t.Fatalf("the record's COMMIT ran with synchronous_commit %q, want [on]", levels)
	}
	// The session's own level is unchanged: Begin's records stay off.
	var level string
	if err := s.pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&level); err != nil || level != "off" {
		t.Fatalf("a session's synchronous_commit after Finish: %q %v, want off", level, err)
	}
}

// TestPostgresFinishRefusedKeepsClaim: when the server refuses the record
// of a held claim, the claim stays held by this store's session until the
// record is written through it: a peer waiting on the lock reads it done,
// never in flight.
func TestPostgresFinishRefusedKeepsClaim(t *testing.T) {
	loc := pgtest.New(t)
	s := openStore(t, loc, Options{})
	beginHeld(t, s)
	refuseOnce(t, s)
	commitProbe(t, s)
	finishSeen(t, s, loc)
	var tried int
	if err := s.pool.QueryRow(ctx, `SELECT last_value FROM zz_updates`).Scan(&tried); err != nil || tried < 2 {
		t.Fatalf("updates tried %d %v: want the refused one and the one after", tried, err)
	}
}

// beginHeld begins m1, a claim this store's session then holds.
func beginHeld(t *testing.T, s *Store) {
	t.Helper()
	if b, err := s.Begin(ctx, "m1", claim.Copy{ClaimID: "C", Fresh: true}, time.Minute); err != nil || b.Result != claim.Acquired {
		t.Fatalf("begin: %+v %v", b, err)
	}
}

// finishSeen finishes m1 as delivered while a peer waits on its lock, and
// checks that the peer, once it got the lock, read the record as done.
func finishSeen(t *testing.T, s *Store, loc string) {
	t.Helper()
	read := peerWaits(t, loc, "m1")
	if _, err := s.Finish(ctx, "m1", claim.Attempt{Status: 201, Outcome: claim.OutDelivered, Called: true}); err != nil {
		t.Fatal(err)
	}
	if got := <-read; got != string(claim.StateDone) {
		t.Fatalf("the peer that got the lock read the record as %q, want %q", got, claim.StateDone)
	}
}
