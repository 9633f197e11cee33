// Package claim is the one home of a claim's lifecycle: what can happen to
// a delivery (an Outcome: an Action and its Reason), the state a record is
// left in, what a holder finds when it begins work on a claim, and the
// record and attempt a store keeps. The consumer decides an Outcome, a
// store records that same value, the summary and the metrics count it and
// dlq reads it back: nothing downstream re-derives it from an HTTP status
// or parses it out of a sentence, so no two parts of the program can
// disagree about why a claim is where it is.
package claim

import (
	"fmt"
	"strings"
)

// Action is what the consumer does with a delivery.
type Action uint8

const (
	NoAction   Action = iota // nothing decided (the zero value)
	Ack                      // basic.ack
	Requeue                  // basic.nack requeue=true
	DeadLetter               // basic.reject requeue=false: eai.dlx takes it to claim.dead
	// Delay: a copy goes to a delay queue (consumer --retry-delays),
	// confirmed, then the delivery is acked; the copy comes back to
	// claim.in when its delay has passed.
	Delay
)

// The words are the ones the attempt log has always stored.
var actionWords = [...]string{NoAction: "", Ack: "ack", Requeue: "requeue", DeadLetter: "dead", Delay: "delay"}

func (a Action) String() string {
	if int(a) < len(actionWords) {
		return actionWords[a]
	}
	return fmt.Sprintf("action(%d)", a)
}

// ParseAction is the inverse of String; NoAction for a word it does not
// know.
func ParseAction(s string) Action {
	for i, w := range actionWords {
		if w == s && s != "" {
			return Action(i)
		}
	}
	return NoAction
}

// Reason says why.
type Reason uint8

const (
	// ReasonUnknown: nothing on record says why (a record written before
	// reasons were kept, or none at all).
	ReasonUnknown Reason = iota
	// Delivered: the partner accepted the claim (201, or a status the
	// operator widened the accepted set to).
	Delivered
	// Duplicate: the claim was delivered before; acked without a call.
	Duplicate
	// Retry: a transient failure (5xx, 408, 429, no answer, or an unexpected
	// 1xx/3xx) with the claim's one retry still ahead: requeued.
	Retry
	// Rejected: the partner refused the claim (a 4xx other than 408 and
	// 429, such as 422 documents missing); asking again gives the same
	// answer.
	Rejected
	// FailedTwice: a transient failure again after the claim's retry.
	FailedTwice
	// NoID: no message_id and no guid, so the claim cannot be deduplicated
	// and is never sent.
	NoID
	// UnexpectedStatus: an answer that is neither acceptance nor failure,
	// such as a proxy's or a health page's 200, or a 204. Never recorded
	// as delivered.
	UnexpectedStatus
	// Unsendable: the claim cannot be put into an HTTP request (its id or
	// content type is not a valid header value); never sent.
	Unsendable
	// Superseded: a copy whose step was carried out already (its delayed
	// copy confirmed, or the claim dead-lettered after it): acked without
	// a call (consumer --retry-delays).
	Superseded
)

var reasonWords = [...]string{
	ReasonUnknown:    "unknown",
	Delivered:        "delivered",
	Duplicate:        "duplicate",
	Retry:            "retry",
	Rejected:         "rejected",
	FailedTwice:      "failed-twice",
	NoID:             "no-id",
	UnexpectedStatus: "unexpected-status",
	Unsendable:       "unsendable",
	Superseded:       "superseded",
}

// String is the reason's one word: stored in the file, printed by dlq,
// accepted by dlq -reason.
func (r Reason) String() string {
	if int(r) < len(reasonWords) {
		return reasonWords[r]
	}
	return fmt.Sprintf("reason(%d)", r)
}

// ReasonWords lists every reason's word, for usage messages.
func ReasonWords() []string { return reasonWords[:] }

// ParseReason is the inverse of String. "transient", dlq's word for
// FailedTwice before reasons were recorded, is accepted too.
func ParseReason(s string) (Reason, bool) {
	if s == "transient" {
		return FailedTwice, true
	}
	for i, w := range reasonWords {
		if w == s {
			return Reason(i), true
		}
	}
	return ReasonUnknown, false
}

// StoredReason reads a reason word as a store keeps it: ReasonUnknown for
// none, or for a word this program does not know.
func StoredReason(s string) Reason {
	r, _ := ParseReason(strings.TrimSpace(s))
	return r
}

// Outcome is what happened to one delivery: the action and its reason.
type Outcome struct {
	Action Action
	Reason Reason
}

// The outcomes the consumer can reach, one value each.
var (
	OutDelivered  = Outcome{Ack, Delivered}
	OutDuplicate  = Outcome{Ack, Duplicate}
	OutRetry      = Outcome{Requeue, Retry}
	OutDelayed    = Outcome{Delay, Retry} // consumer --retry-delays
	OutRejected   = Outcome{DeadLetter, Rejected}
	OutFailed     = Outcome{DeadLetter, FailedTwice}
	OutNoID       = Outcome{DeadLetter, NoID}
	OutUnexpected = Outcome{DeadLetter, UnexpectedStatus}
	OutUnsendable = Outcome{DeadLetter, Unsendable}
	OutSuperseded = Outcome{Ack, Superseded} // consumer --retry-delays
)

// Outcomes is the one list of every outcome the consumer can reach: the
// summary counts each, the metrics keep a series of each from the start,
// and a test holds the list against the values above.
var Outcomes = [...]Outcome{
	OutDelivered, OutDuplicate, OutRetry, OutDelayed, OutRejected,
	OutFailed, OutNoID, OutUnexpected, OutUnsendable, OutSuperseded,
}

// Index is o's place in Outcomes, or -1: counters indexed by it need no
// map and no lock.
func (o Outcome) Index() int {
	for i, x := range Outcomes {
		if x == o {
			return i
		}
	}
	return -1
}

// Word is the outcome as the consumer's log and summary say it:
// delivered, duplicate, superseded, requeued, delayed or dead-lettered.
func (o Outcome) Word() string {
	switch o.Action {
	case Ack:
		switch o.Reason {
		case Duplicate:
			return "duplicate"
		case Superseded:
			return "superseded"
		}
		return "delivered"
	case Requeue:
		return "requeued"
	case Delay:
		return "delayed"
	case DeadLetter:
		return "dead-lettered"
	}
	return "undecided"
}

// Describe is the outcome in a sentence for a person, with the partner's
// status (0 when there was no answer) and, for FailedTwice, the retries
// behind it. It is what the store keeps as dead_reason and what logs show.
func (o Outcome) Describe(status, retries int) string {
	switch o.Reason {
	case Delivered:
		return fmt.Sprintf("accepted (%d)", status)
	case Duplicate:
		return "delivered before: acked without a call"
	case Retry:
		if o.Action == Delay {
			return "transient failure: sent to a delay queue for a later retry"
		}
		return "transient failure: requeued for its one retry"
	case Rejected:
		return "rejected by the claim system"
	case FailedTwice:
		if retries == 1 {
			return "transient failure again after 1 retry"
		}
		return fmt.Sprintf("transient failure again after %d retries", retries)
	case NoID:
		return "no message_id and no guid in the body"
	case UnexpectedStatus:
		return fmt.Sprintf("unexpected %d: not a creation", status)
	case Unsendable:
		return "cannot be sent as an HTTP request"
	case Superseded:
		return "its step was carried out already: acked without a call"
	}
	return "unknown"
}

// ReasonNoID is the dead-letter reason recorded for a message that has no
// message_id and no guid.
var ReasonNoID = OutNoID.Describe(0, 0)
