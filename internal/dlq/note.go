package dlq

import "fmt"

// noteKind is what replay did with one dead letter.
type noteKind int

const (
	noteReplayed  noteKind = iota // copy confirmed, dead copy acked
	noteDelivered                 // skipped: the store records it as delivered
	noteAgain                     // skipped: replayed once already in this run
	noteCapped                    // refused: over -max-replays
	noteRefused                   // refused by the broker (nack or return)
	noteChanged                   // refused: an edit of a body that is not the dead letter's any more
	noteTaken                     // skipped: another replay took its row first (ingested)
	noteReplaying                 // skipped: its row was left replaying (ingested)
)

// note is one line of replay's report. The CLI prints it, dlq serve shows
// it: one sentence for both.
type note struct {
	kind   noteKind
	key    string
	detail string // the broker's reason for a return; the count for noteCapped
}

func (n note) text() string {
	k := field(n.key)
	switch n.kind {
	case noteReplayed:
		return "replayed " + k
	case noteDelivered:
		// The partner has this claim: the dead copy is stale, and the
		// safe way out of the DLQ for it is purge, not -force (which
		// calls the partner with it again).
		return "skipped " + k + ": the store records it as delivered, so this dead copy is stale; purge it with: dlq -yes purge " + shellWord(n.key)
	case noteAgain:
		return "skipped " + k + ": replayed once already in this run; this copy stays in claim.dead"
	case noteCapped:
		return k + ": not replayed: " + n.detail + "; it stays in claim.dead. Fix the claim (dlq edit " + shellWord(n.key) +
			"), or fix the partner and replay it with -force"
	case noteChanged:
		return k + ": not replayed: its dead letter changed since it was read for the edit (replayed, edited or purged " +
			"meanwhile); it stays as it is. Run dlq show " + shellWord(n.key) + " and edit again"
	case noteRefused:
		return k + ": not replayed: " + n.detail + ". It stays in claim.dead"
	case noteTaken:
		return "skipped " + k + ": another replay took it first (it is replayed, or being replayed); nothing sent"
	case noteReplaying:
		return "skipped " + k + ": " + n.detail
	}
	return k
}

// failed says whether the note goes to stderr (the CLI) and counts as a
// refusal (exit 1, the page's "refused").
func (n note) failed() bool {
	return n.kind == noteCapped || n.kind == noteRefused || n.kind == noteChanged
}

// tally counts what replay did.
type tally struct {
	replayed, delivered, again, capped, refused int
	taken                                       int // ingested rows another replay took, or left replaying
}

func (t *tally) add(n note) {
	switch n.kind {
	case noteReplayed:
		t.replayed++
	case noteDelivered:
		t.delivered++
	case noteAgain:
		t.again++
	case noteCapped:
		t.capped++
	case noteRefused, noteChanged:
		t.refused++
	case noteTaken, noteReplaying:
		t.taken++
	}
}

func (t tally) String() string {
	s := fmt.Sprintf("%d replayed, %d skipped as delivered, %d skipped as replayed in this run, %d over -max-replays, %d refused by the broker",
		t.replayed, t.delivered, t.again, t.capped, t.refused)
	if t.taken > 0 {
		// Only over ingested rows: the queue's output stays as it was.
		s += fmt.Sprintf(", %d taken by another replay or left replaying", t.taken)
	}
	return s
}
