package dlq

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"eaimq/internal/audit"
	"eaimq/internal/fail"
)

// Actor is who acts and through what, for the audit trail.
type Actor struct {
	Who string // a named token's name, or the OS user
	Via string // "dlq replay", "dlq serve", ...
}

// record is the audit entry of one action under way: begun before the
// action (the trail must be writable, or nothing is done), ended after it
// with what it did.
type record struct {
	trail audit.Trail // nil: there is none (-no-store)
	e     audit.Entry
	warn  io.Writer
}

// begin checks that the trail can take the entry of action on target.
func begin(ctx context.Context, trail audit.Trail, a Actor, action, target string, warn io.Writer) (*record, error) {
	r := &record{trail: trail, warn: warn, e: audit.Entry{Who: a.Who, Via: a.Via, Action: action, Target: target}}
	if trail == nil {
		return r, nil
	}
	if err := trail.Check(ctx); err != nil {
		return nil, fail.Errorf(fail.IO, "%v\n  every replay, edit and purge is written to the audit trail first; nothing was done", err)
	}
	return r, nil
}

func (r *record) acted(key string) { r.e.IDs = append(r.e.IDs, key) }

func (r *record) notDone(key, why string) {
	r.e.NotDone = append(r.e.NotDone, audit.NotDone{ID: key, Why: why})
}

// note takes a replay's note: replayed is acted on, the rest not done.
func (r *record) note(n note) {
	if n.kind == noteReplayed {
		r.acted(n.key)
	} else {
		r.notDone(n.key, n.text())
	}
}

// end writes the entry with the action's result (err: what stopped it)
// and returns err, or the trail's error when it could not be written: the
// action is done, and the trail must say so, so that is a failure (74).
func (r *record) end(ctx context.Context, err error) error {
	e := &r.e
	e.At = time.Now().UTC()
	switch {
	case err != nil:
		e.Result, e.Error = audit.Failed, err.Error()
	case len(e.NotDone) > 0:
		e.Result = audit.Partial
	case len(e.IDs) == 0:
		e.Result = audit.Nothing
	default:
		e.Result = audit.Done
	}
	if r.trail == nil {
		return err
	}
	// The entry is written even when ctx was cancelled (Ctrl-C): what was
	// done before must be on record.
	werr := r.trail.Append(context.WithoutCancel(ctx), *e)
	if werr == nil {
		return err
	}
	werr = fail.Errorf(fail.IO, "%s %d dead letter(s), but the audit trail could not record it: %v", e.Action, len(e.IDs), werr)
	if err != nil {
		fmt.Fprintf(r.warn, "dlq: %v\n", werr)
		return err
	}
	return werr
}

// target describes what a command was asked to act on.
func target(c Config) string {
	var parts []string
	if len(c.IDs) > 0 {
		ids := make([]string, len(c.IDs))
		for i, id := range c.IDs {
			ids[i] = shellWord(id)
		}
		parts = append(parts, strings.Join(ids, " "))
	} else {
		parts = append(parts, "-all")
	}
	switch {
	case c.Status == StatusNone:
		parts = append(parts, "-status none")
	case c.Status > 0:
		parts = append(parts, fmt.Sprintf("-status %d", c.Status))
	}
	if c.CrashLoop {
		parts = append(parts, "-reason "+CrashLoopWord)
	} else if c.ByReason {
		parts = append(parts, "-reason "+c.Reason.String())
	}
	if c.Limit > 0 {
		parts = append(parts, fmt.Sprintf("-limit %d", c.Limit))
	}
	if c.Force {
		parts = append(parts, "-force")
	}
	return strings.Join(parts, " ")
}
