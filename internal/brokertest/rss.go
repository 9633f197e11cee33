package brokertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// PeakRSS runs cmd (not yet started) under testdata/rssspawn and returns
// its peak resident memory in bytes (getrusage's ru_maxrss), with cmd's
// own error.
//
// ru_maxrss read from here would not be the command's own: Go starts a
// child with clone(CLONE_VM|CLONE_VFORK), and at exec the kernel carries
// the parent's high-water RSS over into the child's (exec_mmap:
// setmax_mm_hiwater_rss). A benchmark's process, after its setup, is often
// larger than what it measures. The spawner holds a few MiB and nothing
// else, so the figure is the command's, or at worst that floor.
func PeakRSS(t testing.TB, cmd *exec.Cmd) (int64, error) {
	t.Helper()
	if cmd.Err != nil { // exec.Command could not find it
		return 0, cmd.Err
	}
	spawn := Binary(t, "eaimq/internal/brokertest/testdata/rssspawn")
	report := filepath.Join(t.TempDir(), "rss")
	cmd.Args = append([]string{spawn, report}, append([]string{cmd.Path}, cmd.Args[1:]...)...)
	cmd.Path = spawn
	runErr := cmd.Run()
	r, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("no peak RSS from %s (%v): %v", spawn, runErr, err)
	}
	kib, err := strconv.ParseInt(strings.TrimSpace(string(r)), 10, 64)
	if err != nil {
		t.Fatalf("rssspawn's report %q: %v", r, err)
	}
	return kib << 10, runErr
}
