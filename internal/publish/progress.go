package publish

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// ProgressMode says when progress is shown: ProgressAuto on a terminal
// only (and for more than one claim), ProgressAlways anywhere,
// ProgressNever not at all.
type ProgressMode string

const (
	ProgressAuto   ProgressMode = "auto"
	ProgressAlways ProgressMode = "always"
	ProgressNever  ProgressMode = "never"
)

// progress shows "publish: n/total confirmed" on stderr. On a terminal it
// is one line rewritten in place with a carriage return, at most ten times
// a second. Anywhere else (a log file, a pipe) a carriage return would
// pile every update onto one line of the log, so ProgressAlways writes
// plain lines there instead, at most one a second; ProgressAuto shows
// nothing off a terminal.
type progress struct {
	w     io.Writer
	total int
	on    bool
	tty   bool
	every time.Duration
	last  time.Time
	done  int
	shown int // done as last written, -1 for nothing yet
}

func newProgress(w io.Writer, mode ProgressMode, total int) *progress {
	return makeProgress(w, mode, total, isTerminal(w))
}

func makeProgress(w io.Writer, mode ProgressMode, total int, tty bool) *progress {
	p := &progress{w: w, total: total, tty: tty, every: time.Second, shown: -1}
	switch mode {
	case ProgressAlways:
		p.on = true
	case ProgressAuto:
		p.on = tty && total > 1
	}
	if tty {
		p.every = 100 * time.Millisecond
	}
	return p
}

func (p *progress) update(done int) {
	p.done = done
	if !p.on || time.Since(p.last) < p.every {
		return
	}
	p.last = time.Now()
	p.write()
}

func (p *progress) write() {
	p.shown = p.done
	if p.tty {
		fmt.Fprintf(p.w, "\rpublish: %d/%d confirmed", p.done, p.total)
	} else {
		fmt.Fprintf(p.w, "publish: %d/%d confirmed\n", p.done, p.total)
	}
}

// finish writes the final count (unless a plain line said it already) and
// ends the terminal's line.
func (p *progress) finish() {
	switch {
	case !p.on:
	case p.tty:
		p.write()
		fmt.Fprintln(p.w)
	case p.shown != p.done:
		p.write()
	}
}

// isTerminal: w is a terminal, not merely a character device (as
// /dev/null is). It asks the terminal driver, as isatty(3) does.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var errno syscall.Errno
	rc.Control(func(fd uintptr) {
		var t syscall.Termios
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	})
	return errno == 0
}
