// Package fail classifies errors by what went wrong, in the few kinds a
// caller acts on: a usage mistake, a broker that cannot be reached, a
// setting that is missing or differs, a local file that failed, an outcome
// that is unknown. Libraries return errors of a Class and never choose an
// exit status; each program maps the class to its documented exit code in
// one place (cli.Code), so that a script calling several programs reads
// the same number the same way.
package fail

import (
	"errors"
	"fmt"
)

// Class is the kind of a failure.
type Class uint8

const (
	// None: no class (the zero value); a program treats it as Failed.
	None Class = iota
	// Failed: the job ran and something in it failed.
	Failed
	// Usage: bad flags or arguments (an unusable URL included: it is one).
	Usage
	// Data: input that is not a valid claim.
	Data
	// Unavailable: the broker (or another service) cannot be reached.
	Unavailable
	// Internal: a bug.
	Internal
	// IO: a local file, or the dedup store, failed.
	IO
	// TempFail: the outcome is unknown, and trying again is safe.
	TempFail
	// NoPerm: the broker refused the user or password.
	NoPerm
	// Config: the topology or a broker setting is missing or differs, or
	// a configured resource cannot be had (an address to listen on).
	Config
	// Interrupted: a signal ended the work before it was done.
	Interrupted
	// NoInput: an input file named on the command line does not exist or
	// cannot be opened (a mistyped path, most likely), as opposed to
	// Data, an input that was read and is wrong.
	NoInput
)

var classWords = [...]string{None: "none", Failed: "failed", Usage: "usage", Data: "data", Unavailable: "unavailable",
	Internal: "internal", IO: "io", TempFail: "tempfail", NoPerm: "noperm", Config: "config", Interrupted: "interrupted", NoInput: "noinput"}

func (c Class) String() string {
	if int(c) < len(classWords) {
		return classWords[c]
	}
	return fmt.Sprintf("class(%d)", c)
}

// Error is an error of a class.
type Error struct {
	Class Class
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// New gives err the class c; a nil err stays nil.
//
// An err that already is, or wraps, an *Error keeps its own class: the
// class was chosen where the most was known. broker.Dial, for one, tells a
// wrong password (NoPerm) from an unknown vhost (Config) from a broker that
// is down (Unavailable), and a caller's general New(Unavailable, err)
// around it must not flatten that into one. So c is the fallback for
// errors that carry none.
func New(c Class, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Class: c, Err: err}
}

// Errorf is New with a formatted error; like New, an *Error wrapped with
// %w keeps its own class.
func Errorf(c Class, format string, a ...any) error {
	return New(c, fmt.Errorf(format, a...))
}

// Of is err's class: None for nil or an error without one.
func Of(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return None
}

// Broker classifies an error from talking to the broker: a missing piece
// of topology (an error wrapping missing) is Config, anything else
// Unavailable (unless err carries its own class, as New explains).
func Broker(err error, missing error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, missing) {
		return New(Config, err)
	}
	return New(Unavailable, err)
}
