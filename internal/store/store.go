// Package store is the consumer's dedup store (EAI_MQ_DB): the record of
// processed message_ids, the in-progress claims that keep two consumers
// from calling the partner with the same id at once, and the attempt log
// that says why a claim went to the dead-letter queue. The consumer writes
// it; the dlq tool reads it.
//
// Store is the one interface; each backend is a package of its own that
// speaks the claim package's vocabulary: sqlite (a file, the lab's
// processed.db by default) and postgres (a postgres:// URL, for consumers
// on several hosts). Both pass the one behavioural suite (storetest).
package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"eaimq/internal/claim"
	"eaimq/internal/fail"
	"eaimq/internal/store/postgres"
	"eaimq/internal/store/sqlite"
)

// EnvPath names the store; DefaultPath is the lab's.
const (
	EnvPath     = sqlite.EnvPath
	DefaultPath = "/root/eaimw/mq/processed.db"
)

// Path returns the store's location from getenv, or the default.
func Path(getenv func(string) string) string {
	if p := getenv(EnvPath); p != "" {
		return p
	}
	return DefaultPath
}

// Store is an open dedup store: the consumer's record of each claim and the
// lock that keeps two consumers from calling the partner with one id at
// once.
type Store interface {
	// Begin takes message id in progress for this holder, unless it is
	// done already, held by another live holder, dead-lettered before
	// (for a redelivered copy), or the step of copy c was carried out
	// already: claim.Begin decides (claim.Start: the record it leaves). On SQLite a claim whose holder stops
	// answering is free again after lease; on PostgreSQL a claim lives
	// exactly as long as its holder's session, and lease is not used.
	Begin(ctx context.Context, id string, c claim.Copy, lease time.Duration) (claim.Begun, error)
	// Finish records the outcome of a claim this holder took with Begin
	// (or of one decided without a call) and releases it; the caller acts
	// on the outcome it returns, only after it returns. What the record
	// becomes, and that outcome, are claim.Finish's (a done record is
	// never overwritten, a late holder releases only what it holds, the
	// lineage only rises); TestLifecycleDifferential holds each backend
	// to it.
	Finish(ctx context.Context, id string, a claim.Attempt) (claim.Outcome, error)
	// Get returns the record of id; found is false when there is none.
	Get(ctx context.Context, id string) (rec claim.Record, found bool, err error)
	// Records returns the records of ids that exist, by id: Get for many
	// ids in few round trips (dlq reads a page of dead letters at once).
	Records(ctx context.Context, ids []string) (map[string]claim.Record, error)
	// Attempts returns the attempt log of id, oldest first.
	Attempts(ctx context.Context, id string) ([]claim.Attempt, error)
	// Prune deletes the done records delivered before olderThan, and
	// their attempt logs, batch records examined per transaction; never
	// a claim in flight, waiting for its retry, or dead-lettered. It
	// returns how many records it deleted (the consumer's --retain).
	Prune(ctx context.Context, olderThan time.Time, batch int) (int, error)
	// Ping asks whether the store can keep a record now: after a failure
	// Transient says waiting fixes, the consumer probes with it.
	Ping(ctx context.Context) error
	// Path names the store for messages, without a password.
	Path() string
	// Created says what Open created, in a phrase that names the full
	// path ("a new SQLite file /var/lib/eaimq/a.db (mode 0600)", "the
	// tables of a new store in postgres://..."); "" when the store was
	// there already.
	Created() string
	// Close waits for pending writes and releases everything held.
	Close() error
}

// Options tune Open.
type Options struct {
	// Synchronous is the durability of an outcome record before the
	// consumer acks: "full" (the default) survives a power loss (on
	// PostgreSQL: the server's synchronous_commit, made "on" where the
	// server has it off); "normal" survives a crash of the consumer only.
	Synchronous string
	// ReadOnly opens an existing store without writing (the dlq tool).
	ReadOnly bool
	// Owner overrides this process's name in in-progress claims (tests
	// stand in for a second process with it).
	Owner string
	// Conns is the most claims the caller holds in progress at once (the
	// consumer's --prefetch); PostgreSQL keeps one connection for each,
	// and two more. 0 means postgres.DefaultConns. A Begin beyond it fails
	// rather than wait for a connection. SQLite ignores it.
	Conns int
	// NoCreate refuses a store that is not there (an SQLite file, or the
	// tables in a PostgreSQL database) rather than create it: Open then
	// fails with an error Misconfigured says is one.
	NoCreate bool
	// Ablation turns SQLite's speed mechanisms off, for the benchmarks
	// that measure what each buys (never set in production).
	Ablation Ablation
}

// Ablation is sqlite.Ablation: what a benchmark turns off.
type Ablation = sqlite.Ablation

// Transient reports whether err, from a store, is one waiting fixes (the
// database server restarting or failing over, the file system full) rather
// than one it does not (a damaged file, a permission, a schema from the
// future).
func Transient(err error) bool { return sqlite.Transient(err) || postgres.Transient(err) }

// Misconfigured reports whether err, from Open, is one that only a person
// can fix (a database that does not exist, a password, a permission, no
// store where Options.NoCreate wants one), rather than a failure of the
// store (a damaged file) or one that passes (Transient: a server down, a
// full disk). Open gives the first kind the class fail.Config (exit 78,
// which the units do not restart) and the rest fail.IO (exit 74, which
// they do).
func Misconfigured(err error) bool { return sqlite.Misconfigured(err) || postgres.Misconfigured(err) }

// NoStore reports whether err, from Open with Options.NoCreate, says there
// was no store to open.
func NoStore(err error) bool {
	return errors.Is(err, sqlite.ErrNoStore) || errors.Is(err, postgres.ErrNoStore)
}

// IsPostgres says whether location names a PostgreSQL store.
func IsPostgres(location string) bool {
	return strings.HasPrefix(location, "postgres://") || strings.HasPrefix(location, "postgresql://")
}

// Open opens the store that location names: a postgres:// or postgresql://
// URL selects PostgreSQL, anything else is the path of an SQLite file. Its
// error carries a class (Misconfigured says which).
func Open(location string, o Options) (Store, error) {
	if IsPostgres(location) {
		s, err := postgres.Open(location, postgres.Options{Synchronous: o.Synchronous, ReadOnly: o.ReadOnly, Owner: o.Owner, Conns: o.Conns, NoCreate: o.NoCreate})
		if err != nil {
			return nil, classify(err) // not a nil *postgres.Store inside a non-nil Store
		}
		return s, nil
	}
	s, err := sqlite.Open(location, sqlite.Options{Synchronous: o.Synchronous, ReadOnly: o.ReadOnly, Owner: o.Owner, NoCreate: o.NoCreate, Ablation: o.Ablation})
	if err != nil {
		return nil, classify(err) // not a nil *sqlite.Store inside a non-nil Store
	}
	return s, nil
}

func classify(err error) error {
	if Misconfigured(err) {
		return fail.New(fail.Config, err)
	}
	return fail.New(fail.IO, err)
}
