package model

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"eaimq/internal/claim"
	"eaimq/internal/pgtest"
	"eaimq/internal/store"
	"eaimq/internal/store/postgres"
)

// TestReplay replays counterexamples against both real stores: each
// Begin and Finish of the trace is made on a store of that worker's own
// (SQLite: one file shared by two holders; PostgreSQL: one database), a
// lease running out is made to run out, and after each step the store's
// answer and record must be what the production rules said in the
// model. The traces: the forked-retry class (the copy token's mutant,
// replayed under the production rules, where the sibling is acked), and
// the findings the checker made in claim: their rules before the fix are
// mutants, and replayed under the production rules their traces show the
// stores do what the fixed rules do, up to the step the fix changes.
func TestReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("replays against SQLite and PostgreSQL; -short runs without servers")
	}
	traces := []struct {
		name string
		cfg  Config
		// last is what the trace's last store step, a Begin, finds under
		// the production rules: the fix, shown on the stores (-1: no check).
		last claim.BeginResult
	}{
		{"forked retry: a sibling of a dead-lettered copy comes back redelivered", Mutants[0].Config(), claim.StepDone},
		// The dead-lettered copy's lost reject: rejected again, not acked
		// as a step carried out (the dead record was kept).
		{"a late holder overwrites a dead-letter decision", mutant(t, "before finding 2's fix"), claim.DeadBefore},
		// The sibling is acked without a call, not acquired as a replay.
		{"a delayed sibling taken for a replay", mutant(t, "before finding 3's fix"), claim.StepDone},
		{"a late holder's outcome after a delivery (Finish keeps the done record)", Mutants[4].Config(), -1},
	}
	for _, tr := range traces {
		r := Check(tr.cfg)
		if r.Violation == "" {
			t.Fatalf("%s: no counterexample to replay", tr.name)
		}
		cfg := tr.cfg
		cfg.Rules = Production()
		steps, err := r.StoreSteps(cfg)
		switch {
		case errors.Is(err, ErrLeft) && len(steps) > 0:
			// A finding's trace, its rule fixed: the production rules go
			// another way at the last store step, and the stores must too.
			t.Logf("%s: %v; replayed up to there", tr.name, err)
		case err != nil:
			t.Fatalf("%s: %v", tr.name, err)
		}
		if last := steps[len(steps)-1]; tr.last >= 0 && (last.Kind != "begin" || last.Begun.Result != tr.last) {
			t.Fatalf("%s: the last store step is %s %+v, want a Begin that finds %v", tr.name, last.Kind, last.Begun, tr.last)
		}
		for _, be := range replayBackends {
			t.Run(be.name+"/"+tr.name, func(t *testing.T) {
				replayOn(t, be, cfg.Consumers, steps)
			})
		}
	}
}

// mutant is the mutant whose name has suffix.
func mutant(t *testing.T, suffix string) Config {
	for _, m := range Mutants {
		if strings.HasSuffix(m.Name, suffix+")") {
			return m.Config()
		}
	}
	t.Fatalf("no mutant %q", suffix)
	return Config{}
}

type replayBackend struct {
	name     string
	location func(t *testing.T) string
	// lose makes the holder of id lose it as its backend can: SQLite's
	// lease runs out, PostgreSQL's session ends.
	lose func(t *testing.T, loc, id string)
}

var replayBackends = []replayBackend{
	{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "processed.db") },
		func(t *testing.T, loc, id string) {
			db, err := sql.Open("sqlite3", "file:"+loc+"?_busy_timeout=10000")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`UPDATE claims SET lease_until = 0 WHERE message_id = ?`, id); err != nil {
				t.Fatal(err)
			}
		}},
	{"postgres", func(t *testing.T) string { return pgtest.New(t) }, func(t *testing.T, loc, id string) {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, loc)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if err := pgtest.TerminateLockHolder(ctx, c, postgres.LockKey(id)); err != nil {
			t.Fatalf("end the session that holds %s: %v", id, err)
		}
	}},
}

func replayOn(t *testing.T, be replayBackend, workers int, steps []StoreStep) {
	ctx := context.Background()
	loc := be.location(t)
	stores := make([]store.Store, workers+1)
	for w := 1; w <= workers; w++ {
		// Owners on another host: SQLite never takes a live holder of
		// this test for a dead process.
		s, err := store.Open(loc, store.Options{Owner: fmt.Sprintf("elsewhere:%d:%d", w, w)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[w] = s
	}
	var told []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s\nsteps so far:\n%s", fmt.Sprintf(format, args...), strings.Join(told, "\n"))
	}
	for _, st := range steps {
		s := stores[st.Worker]
		said := ""
		switch st.Kind {
		case "begin":
			said = fmt.Sprintf(": %v", st.Begun.Result)
		case "finish":
			said = fmt.Sprintf(" %s: %s, record %s", st.Attempt.Outcome.Word(), st.Recorded.Word(), st.Record.State)
		}
		told = append(told, fmt.Sprintf("%2d. w%d %s %s %+v%s", st.N, st.Worker, st.Kind, st.ID, st.Copy, said))
		switch st.Kind {
		case "begin":
			b, err := s.Begin(ctx, st.ID, st.Copy, time.Hour)
			if err != nil {
				fail("step %d: Begin: %v", st.N, err)
			}
			if b.Result != st.Begun.Result || (b.Result == claim.Acquired && b.Failures != st.Begun.Failures) || b.Prior != st.Begun.Prior {
				fail("step %d: Begin of %s by w%d: the store says %+v, the model %+v", st.N, st.ID, st.Worker, b, st.Begun)
			}
		case "finish":
			out, err := s.Finish(ctx, st.ID, st.Attempt)
			if err != nil && store.Transient(err) {
				// PostgreSQL: the first statement of a holder whose session
				// was ended fails. The relay writes again an answer held
				// for its record (finishHeld), and gives any other back
				// unrecorded; the record is compared either way.
				if !claim.HeldForRecord(st.Attempt) {
					told = append(told, "    (not recorded: the relay gives it back; "+err.Error()+")")
					break
				}
				out, err = s.Finish(ctx, st.ID, st.Attempt)
			}
			if err != nil {
				fail("step %d: Finish: %v", st.N, err)
			}
			if out != st.Recorded {
				fail("step %d: Finish of %s by w%d (%s): the store says %s, the model %s", st.N, st.ID, st.Worker, st.Attempt.Outcome.Word(), out.Word(), st.Recorded.Word())
			}
		case "lose":
			be.lose(t, loc, st.ID)
			continue
		}
		rec, found, err := s.Get(ctx, st.ID)
		if err != nil || !found {
			fail("step %d: Get %s: %v (found %v)", st.N, st.ID, err, found)
		}
		if rec.State != st.Record.State || rec.Failures != st.Record.Failures {
			fail("step %d: the record of %s: the store has %s with %d failures, the model %s with %d", st.N, st.ID, rec.State, rec.Failures, st.Record.State, st.Record.Failures)
		}
	}
	t.Logf("%d store steps agree with the model:\n%s", len(steps), strings.Join(told, "\n"))
}
