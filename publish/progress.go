package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress shows "n/total confirmed" on stderr, at most ten times a second,
// and only on a terminal unless asked: a log file should not fill with
// carriage returns.
type progress struct {
	w     io.Writer
	total int
	on    bool
	last  time.Time
	done  int
}

func newProgress(w io.Writer, mode string, total int) *progress {
	on := mode == "always"
	if mode == "auto" && total > 1 {
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				on = true
			}
		}
	}
	return &progress{w: w, total: total, on: on}
}

func (p *progress) update(done int) {
	p.done = done
	if !p.on || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "\rpublish: %d/%d confirmed", done, p.total)
}

func (p *progress) finish() {
	if p.on {
		fmt.Fprintf(p.w, "\rpublish: %d/%d confirmed\n", p.done, p.total)
	}
}
