// Package cli is the glue every eaimq program shares between run and main:
// the documented exit codes, the one place an error becomes one (Code),
// the flags every program parses the same way, and the manual.
package cli

import (
	"bytes"
	"eaimq/internal/fail"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
)

// Exit codes shared by the programs (sysexits.h where one fits), so that a
// script calling several of them reads the same number the same way.
const (
	ExitOK          = 0
	ExitFailure     = 1   // the job ran and something in it failed
	ExitUsage       = 2   // bad flags or arguments
	ExitDataErr     = 65  // EX_DATAERR: input that is not a valid claim
	ExitNoInput     = 66  // EX_NOINPUT: a named input file is missing or cannot be opened
	ExitUnavailable = 69  // EX_UNAVAILABLE: the broker cannot be reached
	ExitSoftware    = 70  // EX_SOFTWARE: an internal error
	ExitIOErr       = 74  // EX_IOERR: a local file (status file, dedup store) failed
	ExitTempFail    = 75  // EX_TEMPFAIL: outcome unknown; trying again is safe
	ExitNoPerm      = 77  // EX_NOPERM: the broker refused the user or password
	ExitConfig      = 78  // EX_CONFIG: the topology or broker setting is missing or differs
	ExitInterrupted = 130 // 128+SIGINT: a signal ended the program before its work was done
)

// codes maps each class of failure (what libraries return) to the exit
// code every program documents for it.
var codes = [...]int{
	fail.None:        ExitFailure,
	fail.Failed:      ExitFailure,
	fail.Usage:       ExitUsage,
	fail.Data:        ExitDataErr,
	fail.Unavailable: ExitUnavailable,
	fail.Internal:    ExitSoftware,
	fail.IO:          ExitIOErr,
	fail.TempFail:    ExitTempFail,
	fail.NoPerm:      ExitNoPerm,
	fail.Config:      ExitConfig,
	fail.Interrupted: ExitInterrupted,
	fail.NoInput:     ExitNoInput,
}

// Error is an error with an exit code of one program's own (publish's 3
// for a returned claim, say), beyond the codes of the classes.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Exit wraps err with code; a nil err stays nil.
//
// An err that already is, or wraps, an *Error keeps its own code: the code
// was chosen where the most was known. broker.Dial, for one, tells a wrong
// password (77) from an unknown vhost (78) from a broker that is down (69),
// and a caller's general Exit(ExitUnavailable, err) around it must not flatten
// that into one number. So code is the fallback for errors that carry none.
func Exit(code int, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) || fail.Of(err) != fail.None {
		return err
	}
	return &Error{Code: code, Err: err}
}

// Exitf is Exit with a formatted error; like Exit, an *Error wrapped with
// %w keeps its own code.
func Exitf(code int, format string, a ...any) error {
	return Exit(code, fmt.Errorf(format, a...))
}

// Usagef is a usage mistake: exit 2.
func Usagef(format string, a ...any) error { return fail.Errorf(fail.Usage, format, a...) }

// Code maps err to its exit code: nil and -h are 0, a flag parse error is 2,
// an *Error its own code, an error of a fail.Class the class's code, and
// anything else 1.
func Code(err error) int {
	var e *Error
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, errParse):
		return ExitUsage
	}
	if c := fail.Of(err); int(c) < len(codes) {
		return codes[c]
	}
	return ExitFailure
}

var errParse = errors.New("flag parse error")

// Parse parses args with fs (made with flag.ContinueOnError, output set to
// the program's stderr, Usage silent) as Flags does, without adding
// -version: for a program that parses its flags in several runs (dlq's,
// after its command), Flags for the first run and Parse for the others.
//
//   - -h or -help prints Help(doc) on stdout, and -h full the whole
//     manual (Manual(doc)), so that it pages and greps; it returns
//     flag.ErrHelp (exit 0);
//   - a mistake prints the flag package's one-line error, a suggestion
//     when a flag was mistyped ("did you mean --max-seconds?"), and where
//     the manual is (not the manual itself, which would push the error off
//     the screen), and returns an error that maps to exit 2 and is not
//     printed again.
func Parse(fs *flag.FlagSet, doc string, args []string, stdout io.Writer) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		// The flag package stops at -h, and what follows it is left in
		// fs.Args(): "full" there asks for the whole manual.
		if rest := fs.Args(); len(rest) > 0 && rest[0] == "full" {
			io.WriteString(stdout, Manual(doc))
		} else {
			io.WriteString(stdout, Help(doc, fs.Name()))
		}
		return err
	case err != nil:
		if s := Suggest(fs, args, err); s != "" {
			fmt.Fprintln(fs.Output(), s)
		}
		fmt.Fprintln(fs.Output(), SeeManual(fs.Name()))
		return &quiet{fmt.Errorf("%w: %w", errParse, err)}
	}
	return nil
}

// quiet marks an error that has been shown to the user already.
type quiet struct{ error }

// Shown marks err as reported already (a program whose log is JSON wrote
// it as a log line): Report prints nothing for it, and Code maps it as it
// maps err. A nil err stays nil.
func Shown(err error) error {
	if err == nil {
		return nil
	}
	return &quiet{err}
}

func (q *quiet) Unwrap() error { return q.error }

// Report prints err once, prefixed with the program's name, unless it is -h
// or was shown already. A usage mistake (exit 2) is followed by the line
// that says where the manual is.
func Report(w io.Writer, program string, err error) {
	var q *quiet
	if err == nil || errors.Is(err, flag.ErrHelp) || errors.As(err, &q) {
		return
	}
	fmt.Fprintf(w, "%s: %v\n", program, err)
	if Code(err) == ExitUsage {
		fmt.Fprintln(w, SeeManual(program))
	}
}

// ReportLog is Report for a program whose log is JSON: it writes what the
// flag package printed (flagErrs), then what Report would print for err,
// each line as one error record with the exit status, so that nothing in
// the stream is plain text. It returns err marked as shown.
func ReportLog(log *slog.Logger, program, flagErrs string, err error) error {
	var b bytes.Buffer
	Report(&b, program, err) // nothing for an error shown already
	for _, line := range strings.Split(strings.TrimSpace(flagErrs)+"\n"+strings.TrimSpace(b.String()), "\n") {
		if line != "" {
			log.Error(line, "exit_status", Code(err))
		}
	}
	return Shown(err)
}

// Broker is fail.Broker, for the programs that have not moved to it yet.
func Broker(err error, missing error) error { return fail.Broker(err, missing) }

// Manual is the package comment of a doc.go file as plain text: the
// comment markers taken off, the package clause and what follows dropped.
// A program embeds its doc.go and prints this as -h, so that the manual
// and the package documentation are one text and cannot drift apart.
func Manual(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if !strings.HasPrefix(line, "//") {
			break
		}
		line = strings.TrimPrefix(line, "//")
		b.WriteString(strings.TrimPrefix(line, " ") + "\n")
	}
	return b.String()
}

// Flags parses args with fs (made with flag.ContinueOnError, output set to
// the program's stderr) the way every eaimq program does (Parse says how
// -h and a mistake are answered), and adds -version: it prints the
// program's version (Version) on stdout and returns flag.ErrHelp: the
// program does nothing more, with exit 0.
func Flags(fs *flag.FlagSet, doc string, args []string, stdout io.Writer) error {
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {} // the flag package calls it after its own message
	if err := Parse(fs, doc, args, stdout); err != nil {
		return err
	}
	if *version {
		fmt.Fprintln(stdout, Version(fs.Name()))
		return flag.ErrHelp
	}
	return nil
}

// SeeManual is the line that follows a usage mistake.
func SeeManual(program string) string {
	return fmt.Sprintf("run '%s -h' for the manual", program)
}

// Build is what the binary says of its own build (debug.ReadBuildInfo):
// the module version ("(devel)" for a build from a work tree), the VCS
// revision and time it was built from, whether the tree had uncommitted
// changes, and the Go version. -version prints it; the consumer exports it
// as eaimq_build_info.
type Build struct {
	Path, Version, Revision, Time, GoVersion string
	Modified, Known                          bool
}

// ReadBuild reads the running binary's Build.
func ReadBuild() Build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Build{}
	}
	b := Build{Path: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion, Known: true}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			b.Revision = kv.Value
		case "vcs.time":
			b.Time = kv.Value
		case "vcs.modified":
			b.Modified = kv.Value == "true"
		}
	}
	return b
}

// Version says which build this is, in one line (Build's fields).
func Version(program string) string {
	b := ReadBuild()
	if !b.Known {
		return program + " (no build information)"
	}
	out := fmt.Sprintf("%s %s %s", program, b.Path, b.Version)
	if b.Revision != "" {
		out += " rev " + b.Revision
		if b.Time != "" {
			out += " " + b.Time
		}
		if b.Modified {
			out += " (with uncommitted changes)"
		}
	}
	return out + " " + b.GoVersion
}
