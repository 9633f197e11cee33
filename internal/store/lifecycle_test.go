package store

import (
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"eaimq/internal/claim"
	"eaimq/internal/pgtest"
	"eaimq/internal/store/postgres"
	"eaimq/internal/store/sqlite"

	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"
)

// The differential test of a claim's lifecycle: random sequences of Begin,
// Finish, a holder's death and a new holder, on three claims at once, run
// against the pure model (claim.Start and claim.Finish) and against each
// backend: SQLite alone (solo mode: one holder at a time, its claims in
// memory), SQLite shared by several holders, and PostgreSQL. After every
// step each claim's record in the backend (state, reason, attempts,
// failures, lineage, dead token, holder) must be the model's, and every
// Begin and Finish must have answered what the model answered. rapid
// shrinks a disagreement to its shortest sequence.
//
// The backends keep their Finish in SQL rather than read the row and call
// claim.Finish in Go: on PostgreSQL the read is a round trip more per
// claim, with the row locked. This test is what holds the SQL to the rule.

// lifeClaims are the claims of one sequence; lifeLease is long enough that
// only a holder's death (Liveness, or its session) frees its claims.
const (
	lifeClaims = 3
	lifeLease  = time.Hour
)

// deadSet is a claim.Liveness the test controls: the holders it was told
// died. SQLite asks it about a claim in flight for another holder.
type deadSet struct {
	mu   sync.Mutex
	dead map[string]bool
}

func (d *deadSet) Gone(holder string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dead[holder]
}

func (d *deadSet) kill(holder string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead == nil {
		d.dead = map[string]bool{}
	}
	d.dead[holder] = true
}

// lifeBackend is one backend as the differential test drives it.
type lifeBackend struct {
	name string
	// holders is how many holders may be alive at once: 1 keeps SQLite
	// solo (a second store on the file would make it shared).
	holders int
	// zombies: a dead holder may still finish what it held (a late
	// holder). A solo store dies by its Close, which ends it whole.
	zombies bool
	// checks is how many sequences rapid runs, unless -rapid.checks (or
	// RAPID_CHECKS) says: the suite's time is bounded by it.
	checks int
	// world makes the backend's world for one sequence.
	world func(t *testing.T) func(rt *rapid.T, seq string) lifeWorld
}

// lifeWorld is one sequence's backend: where its records are.
type lifeWorld struct {
	open func(rt *rapid.T, owner string) Store
	// kill ends holder h as its death would: on SQLite, Liveness says so
	// (a solo store is also closed: its claims in memory go with it); on
	// PostgreSQL its sessions end (closed, or terminated from outside
	// when it lives on as a zombie), and their locks with them.
	kill func(rt *rapid.T, h *lifeHolder)
	// read is the claim's record as the backend has it: the row, and on
	// a solo SQLite store a claim it holds in memory.
	read func(rt *rapid.T, id string, alive []*lifeHolder) claim.Stored
}

// lifeHolder is one store: a holder of claims.
type lifeHolder struct {
	name    string
	s       Store
	alive   bool
	pending map[string]claim.Copy // claims it took (Acquired) and has not finished
}

func TestLifecycleDifferential(t *testing.T) {
	var seqs atomic.Int64
	for _, be := range []lifeBackend{
		{name: "sqlite-solo", holders: 1, checks: 100, world: sqliteWorld(false)},
		{name: "sqlite-shared", holders: 3, zombies: true, checks: 100, world: sqliteWorld(true)},
		{name: "postgres", holders: 3, zombies: true, checks: 40, world: pgWorld},
	} {
		t.Run(be.name, func(t *testing.T) {
			checks(t, be.checks)
			world := be.world(t)
			rapid.Check(t, func(rt *rapid.T) {
				seq := fmt.Sprintf("s%d-", seqs.Add(1))
				runLifecycle(rt, be, world(rt, seq), seq)
			})
		})
	}
}

// checks makes rapid run n sequences in test t, unless the command line
// or the environment chose a number.
func checks(t *testing.T, n int) {
	chosen := os.Getenv("RAPID_CHECKS") != ""
	flag.Visit(func(f *flag.Flag) { chosen = chosen || f.Name == "rapid.checks" })
	if chosen {
		return
	}
	f := flag.Lookup("rapid.checks")
	old := f.Value.String()
	if err := f.Value.Set(strconv.Itoa(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Value.Set(old) })
}

// sqliteWorld gives each sequence a file of its own; shared opens a store
// that never takes a claim first and keeps it open, so that every holder
// shares the file from its first claim.
func sqliteWorld(shared bool) func(t *testing.T) func(rt *rapid.T, seq string) lifeWorld {
	return func(t *testing.T) func(rt *rapid.T, seq string) lifeWorld {
		dir := t.TempDir()
		return func(rt *rapid.T, seq string) lifeWorld {
			file := filepath.Join(dir, seq+"processed.db")
			dead := &deadSet{}
			open := func(rt *rapid.T, owner string) Store {
				s, err := sqlite.Open(file, sqlite.Options{Owner: owner, Liveness: dead, Synchronous: "normal"})
				if err != nil {
					rt.Fatalf("open %s: %v", file, err)
				}
				rt.Cleanup(func() { s.Close() })
				return s
			}
			if shared {
				open(rt, seq+"joiner")
			}
			db, err := sql.Open("sqlite3", "file:"+file+"?_busy_timeout=10000&mode=ro")
			if err != nil {
				rt.Fatal(err)
			}
			rt.Cleanup(func() { db.Close() })
			return lifeWorld{
				open: open,
				kill: func(rt *rapid.T, h *lifeHolder) {
					dead.kill(h.name)
					if !shared {
						h.s.Close()
					}
				},
				read: func(rt *rapid.T, id string, alive []*lifeHolder) claim.Stored {
					var state, reason, owner sql.NullString
					var r claim.Stored
					err := db.QueryRow(`SELECT state, reason, attempts, failures, lineage, dead_token, owner FROM claims WHERE message_id = ?`, id).
						Scan(&state, &reason, &r.Attempts, &r.Failures, &r.Lineage, &r.DeadToken, &owner)
					switch {
					case errors.Is(err, sql.ErrNoRows):
						// A solo store's claim held in memory has no row;
						// Get shows it.
						for _, h := range alive {
							rec, found, err := h.s.Get(ctx, id)
							if err != nil {
								rt.Fatal(err)
							}
							if found && rec.State == claim.StateInFlight {
								return claim.Stored{State: claim.StateInFlight, Failures: rec.Failures, Holder: h.name}
							}
						}
						return claim.Stored{}
					case err != nil:
						rt.Fatal(err)
					}
					r.State, r.Reason, r.Holder = claim.ParseState(state.String), claim.StoredReason(reason.String), owner.String
					return r
				},
			}
		}
	}
}

// pgWorld shares one database among the sequences of the test: each
// sequence's claims and holders have names of their own.
func pgWorld(t *testing.T) func(rt *rapid.T, seq string) lifeWorld {
	loc := pgtest.New(t)
	c, err := pgx.Connect(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(ctx) })
	return func(rt *rapid.T, seq string) lifeWorld {
		return lifeWorld{
			open: func(rt *rapid.T, owner string) Store {
				s, err := postgres.Open(loc, postgres.Options{Owner: owner, Synchronous: "normal", Conns: lifeClaims})
				if err != nil {
					rt.Fatalf("open: %v", err)
				}
				rt.Cleanup(func() { s.Close() })
				return s
			},
			kill: func(rt *rapid.T, h *lifeHolder) {
				// Each claim it holds has its session and lock; end them
				// from outside, and wait until their server processes
				// have exited, so that the locks are free.
				for id := range h.pending {
					if err := pgtest.TerminateLockHolder(ctx, c, postgres.LockKey(id)); err != nil {
						rt.Fatalf("terminate the session holding %s: %v", id, err)
					}
				}
			},
			read: func(rt *rapid.T, id string, _ []*lifeHolder) claim.Stored {
				var state string
				var reason, owner *string
				var r claim.Stored
				err := c.QueryRow(ctx, `SELECT state, reason, attempts, failures, lineage, dead_token, owner FROM claims WHERE message_id = $1`, id).
					Scan(&state, &reason, &r.Attempts, &r.Failures, &r.Lineage, &r.DeadToken, &owner)
				switch {
				case errors.Is(err, pgx.ErrNoRows):
					return claim.Stored{}
				case err != nil:
					rt.Fatal(err)
				}
				r.State, r.Reason = claim.ParseState(state), claim.StoredReason(deref(reason))
				r.Holder = deref(owner)
				return r
			},
		}
	}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// The copies and outcomes a sequence draws from: a first try has no token;
// a delayed copy (step > 0) has one of two, so that siblings occur.
var (
	lifeOutcomes = []claim.Outcome{claim.OutDelivered, claim.OutRetry, claim.OutDelayed, claim.OutRejected,
		claim.OutFailed, claim.OutUnexpected, claim.OutNoID}
	lifeTokens = []string{"t1", "t2"}
)

func drawCopy(rt *rapid.T) claim.Copy {
	c := claim.Copy{ClaimID: "C", Fresh: rapid.Bool().Draw(rt, "fresh"), Step: rapid.IntRange(0, 2).Draw(rt, "step")}
	if c.Step > 0 {
		c.Token = rapid.SampledFrom(lifeTokens).Draw(rt, "token")
	}
	return c
}

func drawAttempt(rt *rapid.T, c claim.Copy, called bool) claim.Attempt {
	return claim.Attempt{
		Outcome: rapid.SampledFrom(lifeOutcomes).Draw(rt, "outcome"),
		Called:  called,
		Lineage: rapid.IntRange(0, 3).Draw(rt, "lineage"),
		Token:   c.Token,
		Status:  503,
	}
}

// runLifecycle runs one random sequence against the model and backend be.
func runLifecycle(rt *rapid.T, be lifeBackend, w lifeWorld, seq string) {
	ids := make([]string, lifeClaims)
	for i := range ids {
		ids[i] = fmt.Sprintf("%sc%d", seq, i)
	}
	model := map[string]claim.Stored{}
	alive := map[string]bool{}
	var holders []*lifeHolder // every holder, dead ones included (zombies)
	born := 0
	start := func() {
		born++
		h := &lifeHolder{name: fmt.Sprintf("%sh%d", seq, born), alive: true, pending: map[string]claim.Copy{}}
		h.s = w.open(rt, h.name)
		alive[h.name] = true
		holders = append(holders, h)
		rt.Logf("start %s", h.name)
	}
	living := func() []*lifeHolder {
		var l []*lifeHolder
		for _, h := range holders {
			if h.alive {
				l = append(l, h)
			}
		}
		return l
	}
	start()

	actions := map[string]func(*rapid.T){
		// A holder begins work on a copy of a claim. The relay never
		// begins a claim its own worker holds (one worker per id), so a
		// holder does not begin one it has pending.
		"begin": func(rt *rapid.T) {
			h := rapid.SampledFrom(living()).Draw(rt, "holder")
			id := rapid.SampledFrom(ids).Draw(rt, "claim")
			if _, ok := h.pending[id]; ok {
				rt.Skip("its own claim")
			}
			c := drawCopy(rt)
			r := model[id]
			want, wantB := claim.Start(r, c, claim.Holding{Holder: h.name}, alive[r.Holder])
			got, err := h.s.Begin(ctx, id, c, lifeLease)
			if err != nil {
				rt.Fatalf("%s Begin %s %+v: %v", h.name, id, c, err)
			}
			rt.Logf("%s Begin %s %+v: %v", h.name, id, c, got.Result)
			if got != wantB {
				rt.Fatalf("%s Begin %s %+v on %+v: %+v, the model says %+v", h.name, id, c, r, got, wantB)
			}
			model[id] = want
			if got.Result == claim.Acquired {
				h.pending[id] = c
			}
		},
		// A holder, alive or (where zombies live on) dead, records the
		// outcome of a claim it took.
		"finish": func(rt *rapid.T) {
			var with []*lifeHolder
			for _, h := range holders {
				if len(h.pending) > 0 && (h.alive || be.zombies) {
					with = append(with, h)
				}
			}
			if len(with) == 0 {
				rt.Skip("nothing held")
			}
			h := rapid.SampledFrom(with).Draw(rt, "holder")
			held := make([]string, 0, len(h.pending))
			for id := range h.pending {
				held = append(held, id)
			}
			slices.Sort(held)
			id := rapid.SampledFrom(held).Draw(rt, "claim")
			a := drawAttempt(rt, h.pending[id], rapid.Bool().Draw(rt, "called"))
			lifeFinish(rt, h, id, a, model)
			delete(h.pending, id)
		},
		// An outcome decided without a Begin (a message that cannot be
		// sent): recorded by a live holder on a claim nobody holds.
		"settle": func(rt *rapid.T) {
			h := rapid.SampledFrom(living()).Draw(rt, "holder")
			id := rapid.SampledFrom(ids).Draw(rt, "claim")
			if model[id].State == claim.StateInFlight {
				rt.Skip("in flight")
			}
			// The relay runs one worker per id in a process (flight), so
			// a holder never settles a claim it has taken itself: that
			// Finish would release the claim (on PostgreSQL, its lock)
			// while the holder's Begin is still pending here. A late
			// holder's Finish can leave the record done with this
			// holder's Begin pending, which the check above lets by.
			if _, ok := h.pending[id]; ok {
				rt.Skip("its own claim")
			}
			lifeFinish(rt, h, id, drawAttempt(rt, claim.Copy{}, false), model)
		},
		// A holder dies: its claims are free for the others; where
		// zombies live on, it may still finish them, late.
		"kill": func(rt *rapid.T) {
			h := rapid.SampledFrom(living()).Draw(rt, "holder")
			w.kill(rt, h)
			h.alive, alive[h.name] = false, false
			if !be.zombies {
				clear(h.pending)
			}
			rt.Logf("kill %s", h.name)
			if len(living()) == 0 {
				start() // a consumer restarted
			}
		},
		// A new holder: a consumer started (again).
		"start": func(rt *rapid.T) {
			if len(living()) >= be.holders {
				rt.Skip("enough holders")
			}
			start()
		},
		"": func(rt *rapid.T) { // after every step
			for _, id := range ids {
				got, want := w.read(rt, id, living()), model[id]
				if got != want && !(!be.zombies && inMemoryGone(got, want, alive)) {
					rt.Fatalf("record %s:\n backend %+v\n model   %+v", id, got, want)
				}
			}
		},
	}
	// rapid draws the actions alike: begin and finish twice as often as
	// a death or a new holder, so that claims go further between deaths
	// (and PostgreSQL opens fewer stores, its most costly step).
	actions["begin again"], actions["finish again"] = actions["begin"], actions["finish"]
	rt.Repeat(actions)
}

// inMemoryGone reports whether got, no record, is what a solo store that
// died leaves of the claim the model has in flight for it: the solo store
// took a claim never seen in memory only (sqlite/solo.go), and its death
// took the claim with it. To every later Begin and Finish such a record
// is the same as none (claim.Start from none; no zombie finishes it).
func inMemoryGone(got, want claim.Stored, alive map[string]bool) bool {
	return got == claim.Stored{} && want == claim.Stored{State: claim.StateInFlight, Holder: want.Holder} && !alive[want.Holder]
}

// lifeFinish records a for holder h in the backend and the model, and
// compares the outcomes.
func lifeFinish(rt *rapid.T, h *lifeHolder, id string, a claim.Attempt, model map[string]claim.Stored) {
	r := model[id]
	want, wantOut := claim.Finish(r, a, claim.Holding{Holder: h.name})
	got, err := h.s.Finish(ctx, id, a)
	if err != nil && Transient(err) {
		// As the relay does while it waits for the store: write it
		// again. (A late holder on PostgreSQL whose session was ended
		// cannot always tell whether its COMMIT landed; its next try
		// writes through another session.)
		rt.Logf("%s Finish %s %v: %v; again", h.name, id, a.Outcome, err)
		got, err = h.s.Finish(ctx, id, a)
	}
	if err != nil {
		rt.Fatalf("%s Finish %s %v: %v", h.name, id, a.Outcome, err)
	}
	rt.Logf("%s Finish %s %v (called %v, lineage %d, token %q): %v", h.name, id, a.Outcome, a.Called, a.Lineage, a.Token, got)
	if got != wantOut {
		rt.Fatalf("%s Finish %s %+v on %+v: %v, the model says %v", h.name, id, a, r, got, wantOut)
	}
	model[id] = want
}

// The disagreements the differential test (or writing claim.Finish) found,
// each as a fixed case.

// TestStepDoneWhileHeldElsewhere: a copy of a step carried out is acked at
// once, even while another live holder has the claim in flight
// (claim.Begin). PostgreSQL answered Busy from the lock alone.
func TestStepDoneWhileHeldElsewhere(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		loc := be.location(t)
		a, b := openStore(t, loc, holderA), openStore(t, loc, holderB)
		begin := func(s Store, c claim.Copy, want claim.BeginResult) {
			t.Helper()
			if got, err := s.Begin(ctx, "g", c, time.Hour); err != nil || got.Result != want {
				t.Fatalf("Begin %+v: %+v %v, want %v", c, got, err, want)
			}
		}
		begin(a, claim.Copy{Fresh: true}, claim.Acquired)
		// Its delayed copy confirmed: step 0 is carried out.
		if _, err := a.Finish(ctx, "g", claim.Attempt{Outcome: claim.OutDelayed, Called: true, Lineage: 1}); err != nil {
			t.Fatal(err)
		}
		begin(a, claim.Copy{Fresh: true, Step: 1, Token: "t1"}, claim.Acquired)
		// The original, redelivered to b while a calls with step 1.
		begin(b, claim.Copy{Step: 0}, claim.StepDone)
		// Anything b would take waits for a.
		begin(b, claim.Copy{Step: 1, Token: "t1"}, claim.Busy)
	})
}

// TestLateHolderAfterEqualOutcome: a holder whose session ended records
// its outcome after another holder took the claim and recorded the same
// state. Its outcome is recorded by the rule for a late holder: the other's
// dead-letter decision is kept (its token with it), the call counted, the
// lineage raised (claim.Finish). PostgreSQL took the other's equal state
// for its own COMMIT and lost the call and the lineage.
func TestLateHolderAfterEqualOutcome(t *testing.T) {
	loc := pgtest.New(t)
	a, b := openStore(t, loc, holderA), openStore(t, loc, holderB)
	if got, err := a.Begin(ctx, "g", claim.Copy{Step: 1, Token: "t1"}, time.Hour); err != nil || got.Result != claim.Acquired {
		t.Fatalf("a: %+v %v", got, err)
	}
	terminateHolder(t, loc, "g")
	if got, err := b.Begin(ctx, "g", claim.Copy{Step: 1, Token: "t2"}, time.Hour); err != nil || got.Result != claim.Acquired {
		t.Fatalf("b: %+v %v, want acquired once a's session is gone", got, err)
	}
	if _, err := b.Finish(ctx, "g", claim.Attempt{Outcome: claim.OutFailed, Called: true, Lineage: 2, Token: "t2"}); err != nil {
		t.Fatal(err)
	}
	out, err := a.Finish(ctx, "g", claim.Attempt{Outcome: claim.OutFailed, Called: true, Lineage: 3, Token: "t1"})
	if err != nil && Transient(err) {
		out, err = a.Finish(ctx, "g", claim.Attempt{Outcome: claim.OutFailed, Called: true, Lineage: 3, Token: "t1"})
	}
	if err != nil || out != claim.OutFailed {
		t.Fatalf("a's late Finish: %v %v", out, err)
	}
	c, err := pgx.Connect(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var attempts, lineage int
	var token string
	if err := c.QueryRow(ctx, `SELECT attempts, lineage, dead_token FROM claims WHERE message_id = 'g'`).Scan(&attempts, &lineage, &token); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 || lineage != 3 || token != "t2" {
		t.Errorf("record: attempts %d, lineage %d, dead token %q; want 2, 3, t2 (claim.Finish)", attempts, lineage, token)
	}
}

// TestSoloReplayAfterDeath: a solo SQLite store that took a replay of a
// dead claim and died before its outcome leaves the claim in flight, as a
// shared one does (claim.Start), so that the replay's redelivered copy is
// called, not rejected again with the old reason.
func TestSoloReplayAfterDeath(t *testing.T) {
	file := filepath.Join(t.TempDir(), "processed.db")
	dead := &deadSet{}
	open := func(owner string) *sqlite.Store {
		s, err := sqlite.Open(file, sqlite.Options{Owner: owner, Liveness: dead})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open("first")
	if got, err := s.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); err != nil || got.Result != claim.Acquired {
		t.Fatalf("Begin: %+v %v", got, err)
	}
	if _, err := s.Finish(ctx, "g", claim.Attempt{Outcome: claim.OutRejected, Called: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Begin(ctx, "g", claim.Copy{Fresh: true}, time.Hour); err != nil || got.Result != claim.Acquired || !got.Restart {
		t.Fatalf("the replay: %+v %v, want acquired, restarting", got, err)
	}
	s.Close() // its death: the process goes, and its lock on the file
	dead.kill("first")
	s2 := open("second")
	if got, err := s2.Begin(ctx, "g", claim.Copy{}, time.Hour); err != nil || got.Result != claim.Acquired {
		t.Fatalf("the replay redelivered: %+v %v, want acquired (not rejected again unsent)", got, err)
	}
}

// TestSoloLeavesAnothersClaim: a solo SQLite store records an outcome
// decided without a Begin on a claim that a store that shared the file
// left in flight; like a shared store (claim.Finish), it counts it and
// leaves the record to that holder.
func TestSoloLeavesAnothersClaim(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "processed.db"), holderA)
	sqliteExec(t, s, claim.SQL(`INSERT INTO claims (message_id, state, owner, lease_until, updated_at) VALUES ('g', {inflight}, 'elsewhere:9:9', ?, 0)`),
		time.Now().Add(time.Hour).UnixMilli())
	if out, err := s.Finish(ctx, "g", claim.Attempt{Outcome: claim.OutUnsendable, Called: true}); err != nil || out != claim.OutUnsendable {
		t.Fatalf("Finish: %v %v", out, err)
	}
	rec, _, err := s.Get(ctx, "g")
	if err != nil || rec.State != claim.StateInFlight || rec.Attempts != 1 {
		t.Fatalf("record: %+v %v; want in flight still, one attempt counted", rec, err)
	}
}
