package brokertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSweepBinaries: the binaries of a test process that has exited are
// removed; those of a running one, and directories not named after a
// process, are not.
func TestSweepBinaries(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(pattern string) string {
		d, err := os.MkdirTemp("", pattern)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	dead := mk(fmt.Sprintf("eaimq-bin-%d-", gone.Process.Pid))
	alive := mk(fmt.Sprintf("eaimq-bin-%d-", os.Getpid()))
	unnamed := mk("eaimq-bin-")
	sweepBinaries()
	for d, want := range map[string]bool{dead: false, alive: true, unnamed: true} {
		_, err := os.Stat(d)
		if got := err == nil; got != want {
			t.Errorf("%s: there %v after the sweep, want %v", filepath.Base(d), got, want)
		}
	}
}
