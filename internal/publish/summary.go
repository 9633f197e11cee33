package publish

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Summary is the one line publish prints on stdout, or with -json the one
// object: how many claims ended each way, and which did not go and why.
// Every file is counted once, so the counts add up to the files given.
type Summary struct {
	Sent        int       `json:"sent"`
	Returned    int       `json:"returned"`
	Nacked      int       `json:"nacked"`
	Invalid     int       `json:"invalid"`
	Changed     int       `json:"changed"`
	Unconfirmed int       `json:"unconfirmed"`
	NotSent     int       `json:"not_sent"`
	Seconds     float64   `json:"seconds"`
	Failures    []Failure `json:"failures"` // every claim not sent, in the order given

	took    time.Duration // the whole run, as Line shows it
	noInput int           // of Invalid, the files that could not be opened (exit 66, not 65)
}

// Failure is one claim that was not sent.
type Failure struct {
	File   string `json:"file"`
	Guid   string `json:"guid"` // "" when the file has no usable guid
	Reason string `json:"reason"`
}

// add counts one claim; any outcome but sent is a failure too.
func (s *Summary) add(o outcome, file, guid, reason string) {
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
	s.Failures = append(s.Failures, Failure{File: file, Guid: guid, Reason: reason})
}

// Line is the text summary: the same fields in the same order every time.
func (s *Summary) Line() string {
	return fmt.Sprintf("publish: %d sent, %d returned, %d nacked, %d invalid, %d changed, %d unconfirmed, %d not sent (%s)",
		s.Sent, s.Returned, s.Nacked, s.Invalid, s.Changed, s.Unconfirmed, s.NotSent, s.took.Round(time.Millisecond))
}

// WriteJSON writes the summary as one JSON object on one line, with "<",
// ">" and "&" in file names and reasons as they are.
func (s *Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(s)
}
