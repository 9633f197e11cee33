package claim

import "strings"

// State is where a claim's record stands: the claims row's state column,
// as its word. The four words are defined here and in the stores' schema
// text, nowhere else.
type State string

const (
	// StateNone: no record (the zero value).
	StateNone State = ""
	// StateInFlight: a holder is calling the partner with it now.
	StateInFlight State = "inflight"
	// StateDone: delivered; the dedup record. Never overwritten.
	StateDone State = "done"
	// StateFailed: a transient failure on record; the claim comes back
	// for its retry.
	StateFailed State = "failed"
	// StateDead: dead-lettered; its reason on record.
	StateDead State = "dead"
)

// States are the states a record can be in.
var States = [...]State{StateInFlight, StateDone, StateFailed, StateDead}

// String is the state's word, as the store keeps it.
func (s State) String() string { return string(s) }

// ParseState reads a stored word: StateNone for "" or a word this program
// does not know.
func ParseState(w string) State {
	for _, s := range States {
		if string(s) == w {
			return s
		}
	}
	return StateNone
}

// State is the record's state after a delivery was acted on with a.
func (a Action) State() State {
	switch a {
	case Ack:
		return StateDone
	case Requeue, Delay:
		return StateFailed
	case DeadLetter:
		return StateDead
	}
	return StateNone
}

// Action is the action a record in state s was left by: NoAction while
// it is in flight, or when there is none.
func (s State) Action() Action {
	switch s {
	case StateDone:
		return Ack
	case StateFailed:
		return Requeue
	case StateDead:
		return DeadLetter
	}
	return NoAction
}

// sqlStates spells each state's word as an SQL string literal.
var sqlStates = strings.NewReplacer(
	"{inflight}", "'"+string(StateInFlight)+"'",
	"{done}", "'"+string(StateDone)+"'",
	"{failed}", "'"+string(StateFailed)+"'",
	"{dead}", "'"+string(StateDead)+"'",
)

// SQL returns the statement q with each {inflight}, {done}, {failed} and
// {dead} replaced by that state's word as an SQL string literal: the
// stores' statements name the states through the one definition here.
func SQL(q string) string { return sqlStates.Replace(q) }
