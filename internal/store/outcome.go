package store

import (
	"strings"

	"eaimq/internal/claim"
)

// Temporary aliases while the store moves to claim's vocabulary.
type (
	Action      = claim.Action
	Reason      = claim.Reason
	Outcome     = claim.Outcome
	Record      = claim.Record
	Attempt     = claim.Attempt
	Begun       = claim.Begun
	BeginResult = claim.BeginResult
)

const (
	NoAction   = claim.NoAction
	Ack        = claim.Ack
	Requeue    = claim.Requeue
	DeadLetter = claim.DeadLetter
	Delay      = claim.Delay

	ReasonUnknown    = claim.ReasonUnknown
	Delivered        = claim.Delivered
	Duplicate        = claim.Duplicate
	Retry            = claim.Retry
	Rejected         = claim.Rejected
	FailedTwice      = claim.FailedTwice
	NoID             = claim.NoID
	UnexpectedStatus = claim.UnexpectedStatus
	Unsendable       = claim.Unsendable

	Acquired   = claim.Acquired
	Done       = claim.Done
	Busy       = claim.Busy
	DeadBefore = claim.DeadBefore
)

var (
	OutDelivered  = claim.OutDelivered
	OutDuplicate  = claim.OutDuplicate
	OutRetry      = claim.OutRetry
	OutDelayed    = claim.OutDelayed
	OutRejected   = claim.OutRejected
	OutFailed     = claim.OutFailed
	OutNoID       = claim.OutNoID
	OutUnexpected = claim.OutUnexpected
	OutUnsendable = claim.OutUnsendable
	ReasonNoID    = claim.ReasonNoID
)

func ParseReason(s string) (Reason, bool)            { return claim.ParseReason(s) }
func ReasonWords() []string                          { return claim.ReasonWords() }
func Key(messageID, guid string, body []byte) string { return claim.Key(messageID, guid, body) }

var actionWords = [...]string{NoAction: "", Ack: "ack", Requeue: "requeue", DeadLetter: "dead", Delay: "delay"}

func stateOf(a Action) string { return a.State().String() }

// backfillReason is the migration's reading of a v1 record: v1 kept the
// decision as a sentence, written by one function whose sentences are
// fixed, so the sentence (not the HTTP status) says which reason it was.
const backfillReason = `CASE
	WHEN state = 'done' THEN 'delivered'
	WHEN state = 'failed' THEN 'retry'
	WHEN state = 'dead' AND dead_reason = 'no message_id and no guid in the body' THEN 'no-id'
	WHEN state = 'dead' AND dead_reason = 'rejected by the claim system' THEN 'rejected'
	WHEN state = 'dead' AND dead_reason LIKE 'transient failure again%' THEN 'failed-twice'
	END`

func parseStoredReason(s string) Reason { return claim.StoredReason(strings.TrimSpace(s)) }
