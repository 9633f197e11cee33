package main

import (
	"fmt"
	"time"
)

// summary is the one line publish prints on stdout, or with -json the one
// object: how many claims ended each way, and which did not go and why.
// Every file is counted once, so the counts add up to the files given.
type summary struct {
	Sent        int       `json:"sent"`
	Returned    int       `json:"returned"`
	Nacked      int       `json:"nacked"`
	Invalid     int       `json:"invalid"`
	Changed     int       `json:"changed"`
	Unconfirmed int       `json:"unconfirmed"`
	NotSent     int       `json:"not_sent"`
	Seconds     float64   `json:"seconds"`
	Failures    []failure `json:"failures"` // every claim not sent, in the order given
}

// failure is one claim that was not sent.
type failure struct {
	File   string `json:"file"`
	Guid   string `json:"guid"` // "" when the file has no usable guid
	Reason string `json:"reason"`
}

// add counts one claim; any outcome but sent is a failure too.
func (s *summary) add(o outcome, file, guid, reason string) {
	switch o {
	case sent:
		s.Sent++
		return
	case returned:
		s.Returned++
	case nacked:
		s.Nacked++
	case invalid:
		s.Invalid++
	case changed:
		s.Changed++
	case unconfirmed:
		s.Unconfirmed++
	default:
		s.NotSent++
	}
	s.Failures = append(s.Failures, failure{File: file, Guid: guid, Reason: reason})
}

// line is the text summary: the same fields in the same order every time.
func (s *summary) line(took time.Duration) string {
	return fmt.Sprintf("publish: %d sent, %d returned, %d nacked, %d invalid, %d changed, %d unconfirmed, %d not sent (%s)",
		s.Sent, s.Returned, s.Nacked, s.Invalid, s.Changed, s.Unconfirmed, s.NotSent, took.Round(time.Millisecond))
}
