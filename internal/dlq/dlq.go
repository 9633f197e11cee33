// Package dlq is the dead-letter engine of the dlq program: the model of a
// dead letter (Dead: the message and what the consumer recorded of it),
// its two sources (claim.dead walked without consuming it, and the rows
// dlq ingest wrote into the store), ingestion, the confirm-before-ack
// mover, and replay, edit, purge, restore and the archive, each without
// losing a dead letter.
//
// Replay, edit, purge and restore print their own notes; list, show and
// history print its model from internal/dlqcli, and dlq serve's page
// (internal/dlqweb) reads through Browser and acts through Act, the code
// the commands run. Neither package is imported here.
//
// It knows nothing of flags: the program parses them into a Config. Its
// errors are classified by internal/fail; the program maps the class to
// its exit code.
package dlq

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/audit"
	"eaimq/internal/broker"
	"eaimq/internal/claim"
	"eaimq/internal/fail"
)

// DefaultMaxReplays is how often a dead letter may have been replayed
// before replay refuses it, unless told otherwise.
const DefaultMaxReplays = 5

// DefaultMaxHeld is how many dead letters a walk holds unacked at most,
// unless told otherwise (-max-held). The broker keeps each one a walk
// holds in its memory until the walk ends; a walk of 100,000 took the
// lab's node to 3.35 times its watermark, where one of 10,000 stayed
// under it (docs/figures.md). The lab's claim.dead holds a few, so its
// walks never meet the bound.
const DefaultMaxHeld = 10_000

// Config is what a command acts on, and how.
type Config struct {
	// The selection. IDs name dead letters by message_id (or, for one
	// that had none, its guid or sha256: key), or by a claimId that is one
	// dead letter's; none selects every one. Status (0: any; StatusNone:
	// none on record), Reason (when ByReason) and CrashLoop narrow it.
	IDs       []string
	Status    int
	Reason    claim.Reason
	ByReason  bool
	CrashLoop bool // -reason crash-loop: the broker's delivery limit dead-lettered it
	// GUID (-guid) is the body's guid; Text (-text) is text its body
	// holds, as whole words (deadletter.HasText). "": any.
	GUID string
	Text string

	Limit      int  // look at the first Limit dead letters only (0: all)
	MaxHeld    int  // a walk holds at most MaxHeld unacked (0: no bound)
	JSON       bool // list, show: JSON instead of text
	Force      bool // replay: also claims recorded as delivered, and over MaxReplays
	MaxReplays int  // replay, serve: refuse a dead letter replayed this often already
	// Rate paces a replay: at most Rate copies a second (0: no pacing).
	Rate float64
	// ReplayLease is how long an ingested row stays replaying before
	// replay -force takes it again (0: DefaultReplayLease).
	ReplayLease time.Duration
	Yes         bool // purge: really purge (without, only name them)
	NoArchive   bool // purge: delete for good instead of moving to claim.dead.archive
	Archive     bool // list, show: the archive's purged dead letters, not claim.dead's

	// The audit trail of replay, edit, purge and serve (nil: none, with
	// -no-store), and who acts.
	Audit audit.Trail
	Actor Actor

	Edit EditSource // edit: where the new body comes from

	Page   Page         // serve
	Ingest IngestConfig // ingest, serve -ingest
	Hooks  Hooks
}

// Page is dlq serve's web page: where it listens and what it allows.
// Its tokens are the program's (Serve's argument), not the engine's.
type Page struct {
	Addr     string        // host:port; not loopback needs tokens
	ReadOnly bool          // no action, not even by a hand-made POST
	Refresh  time.Duration // the groups page reloads this often (0: never)
}

// Hooks are for tests.
type Hooks struct {
	// AfterConfirm, when set, runs after a batch of copies is confirmed
	// and before their dead copies are acked; returning an error stops
	// the replay there, as a crash would.
	AfterConfirm func() error
	// BeforeClaim, when set, runs before a replay claims a batch of
	// ingested rows (they have been read as dead by then).
	BeforeClaim func()
}

// dialTimeout bounds the dial (connect and handshake), and dlq ingest's
// opening of a session after it.
const dialTimeout = 10 * time.Second

// Dial connects to the broker of EAI_AMQP_URL.
func Dial(ctx context.Context, getenv func(string) string) (*amqp.Connection, error) {
	conn, err := broker.Dialer{Program: "dlq", Timeout: dialTimeout, Getenv: getenv}.Dial(ctx, broker.URL(getenv))
	if err != nil {
		return nil, fail.New(fail.Unavailable, err)
	}
	return conn, nil
}
