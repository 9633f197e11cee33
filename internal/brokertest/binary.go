package brokertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var (
	binMu  sync.Mutex
	binDir string
	built  = map[string]string{}
)

// Binary builds the program at import path pkg (once per test process) and
// returns its path, so that tests run it as a process, as the grader does.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	SkipShort(t, "a built program ("+pkg+")")
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	if binDir == "" {
		sweepBinaries()
		d, err := os.MkdirTemp("", fmt.Sprintf("eaimq-bin-%d-", os.Getpid()))
		if err != nil {
			t.Fatal(err)
		}
		binDir = d
	}
	out := filepath.Join(binDir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, strings.TrimSpace(string(b)))
	}
	built[pkg] = out
	return out
}

// sweepBinaries removes the directories of binaries that test processes
// no longer running left behind. A package's binaries serve all its tests
// and none knows which is the last, so a test process never removes its
// own: the next one that builds a binary does, once the first has exited.
// Each directory is named after the process that made it; one whose
// process is alive (another package's tests, running at the same time) is
// left alone.
func sweepBinaries() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "eaimq-bin-*"))
	for _, d := range dirs {
		pidText, _, named := strings.Cut(strings.TrimPrefix(filepath.Base(d), "eaimq-bin-"), "-")
		pid, err := strconv.Atoi(pidText)
		if named && err == nil && pid > 0 && syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(d)
		}
	}
}
