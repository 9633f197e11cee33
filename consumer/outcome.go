package main

import "fmt"

// class is what a partner answer means for the claim.
type class int

const (
	success   class = iota // 2xx
	permanent              // 4xx but 408 and 429: trying again gives the same answer
	transient              // 5xx, 408, 429, no answer (refused, reset, timeout), anything unexpected
)

func (c class) String() string { return [...]string{"success", "permanent", "transient"}[c] }

// classify maps an HTTP status (0 when the call got no answer) to a class.
//
//	2xx              success      ack after the record
//	408, 429         transient    the partner asks us to come back
//	other 4xx        permanent    dead-letter now; requeueing makes a poison message
//	5xx, no answer   transient    one retry, then dead-letter
//	1xx, 3xx         transient    unexpected: never loops, one retry then dead-letter
func classify(status int) class {
	switch {
	case status >= 200 && status < 300:
		return success
	case status == 408 || status == 429:
		return transient
	case status >= 400 && status < 500:
		return permanent
	}
	return transient
}

// action is what the consumer does with the delivery.
type action int

const (
	ack        action = iota // basic.ack
	requeue                  // basic.nack requeue=true
	deadLetter               // basic.reject requeue=false → eai.dlx → claim.dead
)

func (a action) String() string { return [...]string{"ack", "requeue", "dead"}[a] }

// decide turns a class into an action. A transient failure is requeued once:
// it is dead-lettered only when the delivery is a redelivery AND an earlier
// failure of this copy is on record. Both signals are needed: redelivered
// alone is also set when a consumer died before calling the partner (no
// failure yet, so it keeps its retry), and a record alone would also cover
// an older copy of a republished claim (a fresh copy gets its retry again).
func decide(c class, redelivered bool, priorFailures int) (action, string) {
	switch c {
	case success:
		return ack, ""
	case permanent:
		return deadLetter, "rejected by the claim system"
	}
	if redelivered && priorFailures > 0 {
		return deadLetter, fmt.Sprintf("transient failure again after %d retry", priorFailures)
	}
	return requeue, ""
}
