package dlq

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"unicode/utf8"

	"eaimq/internal/audit"
	"eaimq/internal/fail"
	"eaimq/internal/partner"
)

// MaxBody is the largest body an edit takes (1 MiB: a claim to be fixed by
// hand, in an editor or the page's text area), whether from dlq edit or the
// page's edit form.
const MaxBody = 1 << 20

// ErrInvalid wraps why an edited claim cannot be published (CheckEdit):
// the page shows it beside the form, and nothing was done.
var ErrInvalid = errors.New("invalid claim")

// EditSource is where dlq edit takes the new body from: a file (-body), or
// a person in an editor.
type EditSource struct {
	File   string    // -body FILE; "-" is stdin; "" runs Editor
	Editor string    // $VISUAL, else $EDITOR, else vi: a shell command, given the file's path
	Stdin  io.Reader // the editor's and -body -'s stdin
	Dir    string    // where the editor's file goes ("": the system's temporary directory)
}

// Editor is the command dlq edit runs, as git picks it: $VISUAL, else
// $EDITOR, else vi.
func Editor(getenv func(string) string) string {
	for _, k := range []string{"VISUAL", "EDITOR"} {
		if v := getenv(k); v != "" {
			return v
		}
	}
	return "vi"
}

func sha256hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// audit is the edit's part of its audit entry. The copy's message_id is
// the guid: checkEdit keeps the guid the dead letter's message_id, and a
// dead letter without one gets the guid as publish would set it.
func (e *edit) audit() *audit.Edit {
	return &audit.Edit{PreviousSHA256: e.previous, SHA256: sha256hex(e.body), IdempotencyKey: partner.EditKey(e.guid, e.body)}
}

// Edit is the command: it finds the one dead letter c.IDs names, takes a
// new body for it (Edit.File, or an editor on the body), checks it as
// publish checks a claim and as the page's edit and retry does (the guid
// stays the message_id), and replays it through replayDead with the edit
// header: the dead copy is acked only after the broker confirmed the
// edited one. The walk's channel is closed while the editor runs, so that
// the broker does not hold claim.dead for as long as a person types; the
// replay then looks for the dead letter again and refuses when its body is
// not the one that was edited any more.
func Edit(ctx context.Context, b *Browser, c Config, stdout, stderr io.Writer) error {
	rec, err := begin(ctx, c.Audit, c.Actor, "edit", target(c), stderr)
	if err != nil {
		return err
	}
	m, err := FindOne(ctx, b, c)
	if err != nil {
		return err
	}
	orig, key := m.d.Body, m.Key
	if !utf8.Valid(orig) || len(orig) > MaxBody {
		return fail.Errorf(fail.Data, "%s cannot be edited: its body is %d bytes%s; replay or purge it", field(key), len(orig), notUTF8(orig))
	}
	b.Close() // every dead letter back in claim.dead while a person types
	draft := pretty(orig)
	body, kept, err := newBody(ctx, c.Edit, draft, stdout, stderr)
	if err != nil {
		return err
	}
	if bytes.Equal(body, draft) || bytes.Equal(body, orig) {
		removeKept(kept)
		fmt.Fprintf(stderr, "dlq: no change to %s; nothing replayed (dlq replay replays it as it is)\n", field(key))
		return nil
	}
	guid, err := CheckEdit(key, body)
	if err != nil {
		if kept != "" {
			return fail.Errorf(fail.Data, "%v\n  nothing replayed; the edit is kept in %s: fix it and run dlq edit -body %s %s (then delete the file)",
				err, kept, kept, shellWord(key))
		}
		return fail.Errorf(fail.Data, "%v; nothing replayed", err)
	}
	removeKept(kept)
	e := &edit{body: body, guid: guid, actor: c.Actor, previous: sha256hex(orig)}
	return replayEdit(ctx, b, c, rec, e, key, stdout, stderr)
}

// replayEdit replays the edited body of dead letter key on a new walk.
func replayEdit(ctx context.Context, old *Browser, c Config, rec *record, e *edit, key string, stdout, stderr io.Writer) error {
	newBrowser := NewBrowser
	if old.ingested != nil {
		newBrowser = NewIngestedBrowser // the row it was read from
	}
	b, err := newBrowser(old.conn, old.store)
	if err != nil {
		return rec.end(ctx, err)
	}
	b.MaxHeld = old.MaxHeld
	defer b.Close()
	defer b.BoundNote(stderr)
	rec.e.Edit = e.audit()
	t, err := replayDead(ctx, b, selection{limit: c.Limit, selects: Named(key)}, rules{maxReplays: c.MaxReplays, edit: e, hooks: c.Hooks, actor: c.Actor},
		func(n note) {
			rec.note(n)
			if n.failed() {
				fmt.Fprintf(stderr, "dlq: %s\n", n.text())
			} else {
				fmt.Fprintln(stdout, n.text())
			}
		})
	if err != nil {
		return rec.end(ctx, err)
	}
	if t == (tally{}) {
		rec.notDone(key, "not in claim.dead any more")
	}
	if err := rec.end(ctx, nil); err != nil {
		return err
	}
	switch {
	case t == (tally{}):
		return fail.Errorf(fail.Failed, "%s is not in claim.dead any more (replayed, purged or taken meanwhile); nothing replayed", field(key))
	case t.replayed == 0:
		return fail.Errorf(fail.Failed, "the edited %s was not replayed", field(key))
	}
	fmt.Fprintf(stdout, "dlq: %s edited and replayed; the consumer sends it with Idempotency-Key %s\n", field(key), field(rec.e.Edit.IdempotencyKey))
	return nil
}

// FindOne walks to the one dead letter c.IDs[0] names: by key or
// message_id (the first), else as the claimId of exactly one.
func FindOne(ctx context.Context, b *Browser, c Config) (*Dead, error) {
	f := newFilter(c)
	b.narrowTo(c)
	var m *dead
	err := b.walk(ctx, c.Limit, func(d *dead) (bool, error) {
		if f.selects(d) {
			m = d
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if m == nil {
		if r := f.resolved(); len(r) == 1 {
			m = r[0]
		}
	}
	if m == nil {
		return nil, fail.Errorf(fail.Failed, "%s", f.unnamed(b)[0])
	}
	return m, nil
}

// pretty is the body as a person edits it: indented when it is JSON (as
// the page shows it), else as it is.
func pretty(body []byte) []byte {
	var out bytes.Buffer
	if json.Indent(&out, body, "", "  ") != nil {
		return body
	}
	out.WriteByte('\n')
	return out.Bytes()
}

func notUTF8(b []byte) string {
	if !utf8.Valid(b) {
		return " and not UTF-8"
	}
	return fmt.Sprintf(", over the %d-byte limit", MaxBody)
}

// newBody reads the new body: from the file or stdin, or from the file an
// editor saved (kept: its path, for the message when the body is refused).
func newBody(ctx context.Context, src EditSource, draft []byte, stdout, stderr io.Writer) (body []byte, kept string, err error) {
	switch src.File {
	case "-":
		body, err = readAtMost(src.Stdin, "stdin")
		return body, "", err
	case "":
	default:
		f, err := os.Open(src.File)
		if err != nil {
			return nil, "", fail.Errorf(fail.NoInput, "-body: %v; nothing replayed", err)
		}
		defer f.Close()
		body, err = readAtMost(f, src.File)
		return body, "", err
	}
	tmp, err := os.CreateTemp(src.Dir, "dlq-edit-*.json") // 0600: a claim is personal data
	if err != nil {
		return nil, "", fail.Errorf(fail.IO, "a file for the editor: %v; nothing replayed", err)
	}
	path := tmp.Name()
	_, err = tmp.Write(draft)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, "", fail.Errorf(fail.IO, "a file for the editor: %v; nothing replayed", err)
	}
	// As git runs it: the editor is a shell command, the path its argument.
	cmd := exec.CommandContext(ctx, "sh", "-c", src.Editor+` "$1"`, "dlq-editor", path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = src.Stdin, stdout, stderr
	if err := cmd.Run(); err != nil {
		return nil, "", fail.Errorf(fail.Failed, "the editor (%s) ended with %v; nothing replayed (the text is in %s)", src.Editor, err, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fail.Errorf(fail.IO, "read what the editor saved: %v; nothing replayed", err)
	}
	defer f.Close()
	body, err = readAtMost(f, path)
	return body, path, err
}

// readAtMost reads r, refusing more than an edit may be.
func readAtMost(r io.Reader, name string) ([]byte, error) {
	if r == nil {
		return nil, fail.Errorf(fail.Usage, "-body -: no stdin")
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxBody+1))
	if err != nil {
		return nil, fail.Errorf(fail.IO, "read %s: %v; nothing replayed", name, err)
	}
	if len(b) > MaxBody {
		return nil, fail.Errorf(fail.Data, "%s: %w: larger than the %d-byte limit (publish's -max-bytes); nothing replayed", name, ErrInvalid, MaxBody)
	}
	return b, nil
}

// removeKept removes the editor's file once its body is used or unchanged.
func removeKept(path string) {
	if path != "" {
		os.Remove(path)
	}
}
