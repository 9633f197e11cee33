package brokertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
		d, err := os.MkdirTemp("", "eaimq-bin-")
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
