// Package audit is dlq's audit trail: one JSON line for every action the
// command line or the page takes on the dead letters (replay, edit, purge;
// one claim or a group), saying when, who, what was asked, which dead
// letters it acted on, and how it ended.
//
// The trail lives beside the consumer's store: for an SQLite store, in the
// file EAI_MQ_DB-audit.jsonl next to it (mode 0600; claims are personal
// data); for a PostgreSQL store, in the table eaimq_audit of that database,
// which this package creates itself, outside the store's schema versions
// (the store knows nothing of it). dlq writes an entry after the action,
// with its result; it checks that it can write one before the action
// starts, so that an action is never taken that the trail cannot record.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"
)

// Entry is one action.
type Entry struct {
	At      time.Time // when it ended
	Who     string    // a named token's name, or the OS user
	Via     string    // the program and command: "dlq replay", "dlq serve"
	Action  string    // replay, edit, purge, restore
	Target  string    // what was asked: the IDs, -all and the filters, a group
	IDs     []string  // the dead letters it acted on: replayed, edited, deleted
	NotDone []NotDone // selected or named and not acted on, and why
	Result  string    // one of the Result words
	Error   string    // what stopped it ("" when nothing did)
	Edit    *Edit     // for an edit
	// Archive is where a purge moved the dead letters (claim.dead.archive);
	// "" for a purge for good (-no-archive) and for the other actions.
	Archive string
}

// The results.
const (
	Done    = "done"    // everything selected was acted on
	Partial = "partial" // some selected or named were not (NotDone says why)
	Failed  = "failed"  // an error stopped it (Error); IDs is what was done before
	Nothing = "nothing" // nothing was selected
)

// NotDone is a dead letter an action did not act on.
type NotDone struct {
	ID  string `json:"id"`
	Why string `json:"why"`
}

// Edit is what an edit changed.
type Edit struct {
	PreviousSHA256 string `json:"previous_sha256"` // of the body it replaced
	SHA256         string `json:"sha256"`          // of the body it sent
	IdempotencyKey string `json:"idempotency_key"` // the new key the consumer sends for it
}

// entryJSON is an Entry's line: every field, null where there is none.
type entryJSON struct {
	At      time.Time `json:"at"`
	Who     string    `json:"who"`
	Via     string    `json:"via"`
	Action  string    `json:"action"`
	Target  string    `json:"target"`
	IDs     []string  `json:"ids"`
	NotDone []NotDone `json:"not_done"`
	Result  string    `json:"result"`
	Error   *string   `json:"error"`
	Edit    *Edit     `json:"edit"`
	Archive *string   `json:"archive"`
}

// MarshalJSON writes the entry's one line.
func (e Entry) MarshalJSON() ([]byte, error) {
	j := entryJSON{At: e.At.UTC(), Who: e.Who, Via: e.Via, Action: e.Action, Target: e.Target, IDs: e.IDs,
		NotDone: e.NotDone, Result: e.Result, Edit: e.Edit}
	if j.IDs == nil {
		j.IDs = []string{}
	}
	if j.NotDone == nil {
		j.NotDone = []NotDone{}
	}
	if e.Error != "" {
		j.Error = &e.Error
	}
	if e.Archive != "" {
		j.Archive = &e.Archive
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a line MarshalJSON wrote.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var j entryJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = Entry{At: j.At, Who: j.Who, Via: j.Via, Action: j.Action, Target: j.Target, IDs: j.IDs,
		NotDone: j.NotDone, Result: j.Result, Edit: j.Edit}
	if j.Error != nil {
		e.Error = *j.Error
	}
	if j.Archive != nil {
		e.Archive = *j.Archive
	}
	return nil
}

// Names says whether the entry is about dead letter id (acted on or not).
func (e Entry) Names(id string) bool {
	return slices.Contains(e.IDs, id) || slices.ContainsFunc(e.NotDone, func(n NotDone) bool { return n.ID == id })
}

// ids is every id the entry names, for the PostgreSQL index.
func (e Entry) ids() []string {
	out := slices.Clone(e.IDs)
	for _, n := range e.NotDone {
		out = append(out, n.ID)
	}
	if out == nil {
		out = []string{}
	}
	return out
}

// Trail is where the entries go.
type Trail interface {
	// Check makes sure an entry can be written, before an action.
	Check(ctx context.Context) error
	// Append writes one entry, durably.
	Append(ctx context.Context, e Entry) error
	// Entries calls fn for each entry that names id ("": every one),
	// oldest first.
	Entries(ctx context.Context, id string, fn func(Entry) error) error
	// Where names the trail for messages, without a password.
	Where() string
	Close() error
}

// Open opens the trail of the store at location (EAI_MQ_DB): the table in
// a postgres:// database, else the file beside the SQLite file.
func Open(ctx context.Context, location string) (Trail, error) {
	if strings.HasPrefix(location, "postgres://") || strings.HasPrefix(location, "postgresql://") {
		return openTable(ctx, location)
	}
	return &file{path: FilePath(location)}, nil
}

// OSUser is who runs this process, for the trail of the command line: the
// user's name, and the one who ran sudo when it was sudo.
func OSUser() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" {
		name = fmt.Sprintf("uid %d", os.Getuid())
	}
	if s := os.Getenv("SUDO_USER"); s != "" && s != name {
		name += " (sudo from " + s + ")"
	}
	return name
}
