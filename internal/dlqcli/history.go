package dlqcli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"eaimq/internal/audit"
	"eaimq/internal/dlq"
	"eaimq/internal/fail"
)

// historyListed is how many ids of one entry the text lists.
const historyListed = 10

// History is the command: the audit trail's entries, oldest first, each
// as a few lines of text or (c.JSON) one JSON object; with an ID, those
// that name it. An ID no entry names is a failure (exit 1), as show's is.
func History(ctx context.Context, trail audit.Trail, c dlq.Config, w, stderr io.Writer) error {
	id := ""
	if len(c.IDs) > 0 {
		id = c.IDs[0]
	}
	n := 0
	err := trail.Entries(ctx, id, func(e audit.Entry) error {
		n++
		if c.JSON {
			return dlq.WriteJSON(w, e)
		}
		writeEntry(w, e, id)
		return nil
	})
	if err != nil {
		return fail.New(fail.IO, err)
	}
	switch {
	case n == 0 && id != "":
		return fail.Errorf(fail.Failed, "no entry for %q in the audit trail %s", dlq.Clip(dlq.Esc(id, false), dlq.FieldWidth), trail.Where())
	case n == 0:
		fmt.Fprintf(stderr, "dlq: no entry in the audit trail %s yet\n", trail.Where())
	}
	return nil
}

// writeEntry is one entry as text, escaped (ids and reasons come from
// messages), its lists clipped; with id, that id's part first.
func writeEntry(w io.Writer, e audit.Entry, id string) {
	fmt.Fprintf(w, "%s  %-7s %-8s by %s (%s): %s\n", e.At.UTC().Format(time.DateTime+" MST"), e.Action, e.Result,
		dlq.Field(e.Who), dlq.Field(e.Via), dlq.Field(e.Target))
	if len(e.IDs) > 0 {
		fmt.Fprintf(w, "  %s (%d): %s\n", dlq.ActedWord(e), len(e.IDs), listed(e.IDs, id))
	}
	shown := 0
	for _, nd := range e.NotDone {
		if id != "" && nd.ID != id {
			continue
		}
		if shown == historyListed {
			fmt.Fprintf(w, "  ... and %d more not done\n", len(e.NotDone)-shown)
			break
		}
		shown++
		fmt.Fprintf(w, "  not done: %s: %s\n", dlq.Field(nd.ID), dlq.Field(nd.Why))
	}
	if id == "" && len(e.NotDone) > shown {
		fmt.Fprintf(w, "  ... and %d more not done\n", len(e.NotDone)-shown)
	}
	if e.Edit != nil {
		fmt.Fprintf(w, "  edit: previous body sha256 %s, new %s, Idempotency-Key %s\n", dlq.Field(e.Edit.PreviousSHA256),
			dlq.Field(e.Edit.SHA256), dlq.Field(e.Edit.IdempotencyKey))
	}
	if e.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", dlq.Field(e.Error))
	}
}

// listed is the first historyListed ids, and id when it is a later one.
func listed(ids []string, id string) string {
	first := ids[:min(len(ids), historyListed)]
	out := make([]string, 0, len(first)+1)
	for _, x := range first {
		out = append(out, dlq.Field(x))
	}
	if id != "" && !slices.Contains(first, id) && slices.Contains(ids, id) {
		out = append(out, dlq.Field(id))
	}
	s := strings.Join(out, " ")
	if more := len(ids) - len(out); more > 0 {
		s += fmt.Sprintf(" ... and %d more", more)
	}
	return s
}
