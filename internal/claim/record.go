package claim

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Record is what a store knows of one message_id.
type Record struct {
	MessageID  string
	State      State
	Outcome    Outcome // the last decision on record (Action is NoAction while in flight)
	ClaimID    string
	Attempts   int
	Failures   int
	LastStatus int
	LastError  string
	DeadReason string
	UpdatedAt  time.Time
	DoneAt     time.Time
}

// Delivered reports whether the partner answered success for this id.
func (r Record) Delivered() bool { return r.State == StateDone }

// Attempt is one call to the partner, or one decision without a call.
type Attempt struct {
	At          time.Time
	Redelivered bool
	Status      int    // HTTP status; 0 when there was no answer
	Error       string // short error or response excerpt
	Outcome     Outcome
	Detail      string // the outcome in a sentence (Outcome.Describe), kept for a dead letter
	Latency     time.Duration
	Called      bool // the partner was called (counts as an attempt)
	// Lineage is the record's lineage after this outcome (Found.Lineage):
	// the step after the one whose copy it carried out (--retry-delays: a
	// delayed copy confirmed, or a dead-letter decision); 0 changes
	// nothing. A store only ever raises it.
	Lineage int
	// Token is the Token of the copy this attempt was for (Copy.Token). A
	// store keeps it with a dead-letter decision (Found.DeadToken).
	Token string
}

// Logged reports whether an attempt recorded as out goes into the attempt
// log. The log keeps what went wrong: every failed call and every
// dead-letter decision. A success is fully told by the claim's record
// (status, time, attempt count), and writing it again would double the
// pages each delivered claim dirties.
func (a Attempt) Logged(out Outcome) bool {
	return !(out.Action == Ack && a.Outcome.Action == Ack)
}

// Counts is what a Finish adds to a record's counters: a call, and a
// transient failure (Requeue or Delay: the claim comes back).
func (a Attempt) Counts() (called, failed int) {
	if a.Called {
		called = 1
	}
	if a.Outcome.Action.State() == StateFailed {
		failed = 1
	}
	return called, failed
}

// Key is a store's key for a message: its message_id, else the guid in its
// body, else "sha256:" and a hash of the body (a message with neither
// cannot be deduplicated; the key only files its dead-letter reason).
// The consumer and the dlq tool both use it, so they find the same record.
func Key(messageID, guid string, body []byte) string {
	switch {
	case messageID != "":
		return messageID
	case guid != "":
		return guid
	}
	h := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(h[:12])
}
