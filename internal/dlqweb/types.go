package dlqweb

import (
	"context"
	"time"

	"eaimq/internal/dlq"
)

// Group is the dead letters of one recorded reason.
type Group struct {
	ID       string // stable across reloads: a hash of the reason and status
	Reason   string // the store's word: rejected, failed-twice, no-id, ...; or crash-loop
	Status   int    // the last HTTP status on record (0: none)
	Sentence string // the recorded sentence ("rejected by the claim system")
	Answer   string // the partner's answer to the first of them
	Count    int
	First    time.Time // dead-lettered first and last (x-death time)
	Last     time.Time
	Claims   []Ref // the first MaxListed of them

	rows *dlq.RowSelect // over ingested rows: the group's pages are the store's (dlq.Browser.RowPage)
}

// MaxListed is how many claim ids a group keeps for the groups page: the
// page of a DLQ of 100,000 stays a page (the group's own pages list the
// rest).
const MaxListed = 200

// PerGroup is how many of a group's claims the groups page shows.
const PerGroup = 20

// PerPage is how many claims a page of a group or of a search lists.
const PerPage = 100

// Ref is one dead letter in a list.
type Ref struct {
	Key     string // what actions name it by: message_id, guid or sha256: key
	ClaimID string
	DeadAt  time.Time
	Reason  string // as the group says it
	Status  int
	Edited  bool
	Replays int64
	// An archived dead letter's purge: when and by whom.
	PurgedAt time.Time
	PurgedBy string
}

// Overview is what the groups page shows.
type Overview struct {
	Groups []Group
	Total  int // claim.dead's messages when the walk started
	Looked int
	At     time.Time     // when the walk ended
	Took   time.Duration // how long it took
	Depth  int           // claim.dead's messages now (the queue's depth)
	// Cached: an earlier walk's groups, kept because claim.dead's depth
	// did not change and no action ran since, or because the last walk
	// ended too recently to walk again (Next: when one may).
	Cached  bool
	Next    time.Time
	Warning string // what the walk saw that a person must know (a quorum claim.dead's delivery counts)
}

// List is one page of dead letters: a group's, or a search's.
type List struct {
	Query   string // the search ("" for a group)
	Archive bool   // the archive's purged dead letters, not a group or a search
	// Store: the dead letters are rows ingested into the store (their
	// archive a state of the row), not claim.dead's messages.
	Store  bool
	Group  Group // the group (its ID "" for a search)
	Refs   []Ref
	Page   int // from 1
	Count  int // every match among those looked at
	Looked int
	Total  int
}

// Pages is how many pages the matches take.
func (l List) Pages() int { return max(1, (l.Count+PerPage-1)/PerPage) }

// Field is one name and value, for properties and headers.
type Field struct {
	Name, Value string
	Depth       int // nesting, for headers that are tables
}

// Attempt is one row of the store's attempt log.
type Attempt struct {
	At          time.Time
	Redelivered bool
	Status      int
	Action      string
	Reason      string
	Latency     time.Duration
	Error       string
}

// Event is one entry of the audit trail that names a claim.
type Event struct {
	At     time.Time
	Who    string
	Via    string
	Action string
	Result string // done, partial, failed, nothing
	Note   string // what became of this claim in it
}

// Claim is one dead letter in full.
type Claim struct {
	Ref
	GroupID    string
	Why        string  // reason and sentence
	Record     string  // the store's record in one line ("" without one)
	Properties []Field // AMQP properties
	Headers    []Field // AMQP headers, x-death included
	XDeath     []Field // x-death alone
	Edit       []Field // the edit header of an edited copy
	Body       string  // the body, formatted when it is JSON
	BodyRaw    string  // the body as it is, for the edit form
	BodySHA256 string  // of the body as it is: an edit replaces this body, or none
	Editable   bool    // UTF-8 and not clipped: it can be edited in a browser
	NotUTF8    bool
	History    []Attempt
	Failures   int     // repeated failures: failed attempts on record
	Events     []Event // the audit trail's entries that name it
}

// Target names what an action acts on: one dead letter or one group.
type Target struct {
	ID    string
	Group string
}

// Report is what an action did.
type Report struct {
	Action    string // retry, purge, edit, restore
	Replayed  int
	Delivered int // skipped as delivered
	Again     int // skipped as replayed already in this run
	Refused   int // over -max-replays or refused by the broker
	Purged    int
	Archive   bool // the purge moved them to claim.dead.archive
	Store     bool // it acted on rows ingested into the store (the archive a state of the row)
	Restored  int
	Arrived   int      // dead letters that arrived in claim.dead while it ran
	Lines     []string // what happened to each, in the CLI's words
	NotFound  bool     // the target was not in claim.dead
}

// Health is what /healthz answers.
type Health struct {
	OK    bool   `json:"ok"`
	Depth int    `json:"claim_dead"` // claim.dead's messages, when the broker answered
	Store string `json:"store"`      // ok, none, or the error
	Error string `json:"error,omitempty"`
}

// Backend is every read and action of the page; web (this package's
// backend over the engine, internal/dlq) is the program's. who is the named
// token's name of the request ("" on loopback without tokens): the audit
// trail's who.
type Backend interface {
	// Overview is the groups; refresh asks for a new walk now.
	Overview(ctx context.Context, refresh bool) (Overview, error)
	// Group is page page of group id's dead letters.
	Group(ctx context.Context, id string, page int) (List, error)
	// Search is page page of the dead letters whose id or claimId
	// contains q.
	Search(ctx context.Context, q string, page int) (List, error)
	// Claim returns the dead letter id; found is false when claim.dead
	// holds none.
	Claim(ctx context.Context, id string) (c Claim, found bool, err error)
	Retry(ctx context.Context, who string, t Target) (Report, error)
	Purge(ctx context.Context, who string, t Target) (Report, error)
	// Archive is page page of the purged dead letters in the archive.
	Archive(ctx context.Context, page int) (List, error)
	// Restore moves the archived dead letter t.ID back to claim.dead.
	Restore(ctx context.Context, who string, t Target) (Report, error)
	// CheckEdit says why body cannot replace the body of dead letter id
	// (an error wrapping dlq.ErrInvalid), or nil.
	CheckEdit(id string, body []byte) error
	// EditRetry replays body in place of dead letter id's, when its body
	// still has the sha256 previous ("": any).
	EditRetry(ctx context.Context, who, id string, body []byte, previous string) (Report, error)
	Health(ctx context.Context) Health
	// OverRows says the page reads dead letters ingested into the store:
	// a purge makes a row purged (the store's archive), a restore makes
	// it dead again, a retry marks it replayed; claim.dead.archive plays
	// no part. The confirmation page says which.
	OverRows(ctx context.Context) bool
}
