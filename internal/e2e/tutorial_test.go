package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"eaimq/internal/rabbitctl"
)

// TestTutorialAsWritten runs docs/tutorial.md as a newcomer would: its sh
// blocks in order, in one bash (what one step exports, the next uses), from
// the repository's top directory. Each block must succeed, and print what
// the text block under it shows, up to what inAnyOrder lets vary. So a
// program whose output changes fails here until the tutorial says the new
// thing. The tutorial's vhost, directory and port become the test's own: a
// vhost with a random name (deleted at the end, by the tutorial itself and
// then by the test), a temporary directory, a free port.
//
// Serial: it builds into the repository's bin/, as the demo test does,
// and two builds there at once would replace each other's files; and the
// consumer's runs are bounded by --max-seconds, which a loaded machine
// stretches. It runs on this machine's node rabbit@localhost whatever
// EAIMQ_TEST_AMQP_URL says, since the tutorial names that node.
func TestTutorialAsWritten(t *testing.T) {
	top := repoTop()
	doc, err := os.ReadFile(filepath.Join(top, "docs", "tutorial.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps := shellSteps(string(doc))
	if len(steps) < 10 {
		t.Fatalf("docs/tutorial.md has %d sh blocks; the test expected the whole walkthrough", len(steps))
	}

	ctl := rabbitctl.Ctl{Node: rabbitctl.LabNode}
	if _, err := ctl.Run(context.Background(), "-q", "eval", "node()."); err != nil {
		t.Fatalf("the tutorial needs RabbitMQ as node %s: %v; start it with scripts/mq-up.sh", rabbitctl.LabNode, err)
	}
	var b [6]byte
	rand.Read(b[:])
	vhost := "eaimq-tutorial-test-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		// The tutorial deletes its vhost as its last step; this is for a
		// run that failed before it.
		out, err := ctl.Run(context.Background(), "-q", "delete_vhost", vhost)
		if err != nil && !strings.Contains(string(out)+err.Error(), "not_found") && !strings.Contains(string(out)+err.Error(), "does not exist") {
			t.Errorf("delete vhost %s: %v %s", vhost, err, out)
		}
	})
	dir := filepath.Join(t.TempDir(), "eaimq-tutorial")
	port := fmt.Sprint(freePort(t))
	// A Replacer tries its pairs in order at each place, so the longer
	// names go first: the directory ends in the vhost's name, and the
	// test's vhost name starts with the tutorial's.
	toTest := strings.NewReplacer("$HOME/eaimq-tutorial", dir, "~/eaimq-tutorial", dir,
		"eaimq-tutorial", vhost, "127.0.0.1:9202", "127.0.0.1:"+port)
	fromTest := strings.NewReplacer(dir, "~/eaimq-tutorial", vhost, "eaimq-tutorial", "127.0.0.1:"+port, "127.0.0.1:9202")

	var script strings.Builder
	script.WriteString("set -e\nexec 2>&1\n")
	for i, s := range steps {
		fmt.Fprintf(&script, "printf '\\n%s\\n'\n%s\n", stepMarker(i), toTest.Replace(s.script))
	}
	fmt.Fprintf(&script, "printf '\\n%s\\n'\n", stepMarker(len(steps)))
	file := filepath.Join(t.TempDir(), "tutorial.sh")
	if err := os.WriteFile(file, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", file)
	cmd.Dir = top
	cmd.Env = withoutProgramsEnv(os.Environ())
	// Its own process group: claimsys runs in the background, and a run
	// that fails before the tutorial's kill must not leave it behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	t.Cleanup(func() {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	outb, runErr := cmd.Output()
	out := fromTest.Replace(string(outb))

	parts := splitSteps(out, len(steps))
	for i, s := range steps {
		got, ran := parts[i]
		if !ran {
			t.Fatalf("docs/tutorial.md:%d: the block did not start (bash: %v); the run printed:\n%s", s.line, runErr, out)
		}
		if _, next := parts[i+1]; !next {
			t.Fatalf("docs/tutorial.md:%d: this block failed (bash: %v):\n%s\n-- it printed:\n%s", s.line, runErr, s.script, got)
		}
		if !s.hasWant {
			continue
		}
		if inAnyOrder(got) != inAnyOrder(s.want) {
			t.Errorf("docs/tutorial.md:%d: the block printed something else than the tutorial shows.\n-- block:\n%s\n-- tutorial shows:\n%s\n-- printed:\n%s", s.line, s.script, s.want, got)
		}
	}
	if runErr != nil {
		t.Errorf("bash: %v", runErr)
	}
}

// shellStep is one sh block of a page, and the text block that follows it
// with nothing but blank lines between: what it prints.
type shellStep struct {
	line         int // of the block's first command, 1-based
	script, want string
	hasWant      bool
}

func shellSteps(doc string) []shellStep {
	var steps []shellStep
	blocks := fencedBlocks(doc)
	for i, b := range blocks {
		if b.info != "sh" {
			continue
		}
		s := shellStep{line: b.line, script: b.text}
		if i+1 < len(blocks) && blocks[i+1].info == "text" && blocks[i+1].prev == b.end {
			s.want, s.hasWant = blocks[i+1].text, true
		}
		steps = append(steps, s)
	}
	return steps
}

func stepMarker(i int) string { return fmt.Sprintf("=== eaimq tutorial step %d ===", i) }

// splitSteps cuts the run's output at the markers: parts[i] is what step i
// printed, present only when step i started.
func splitSteps(out string, n int) map[int]string {
	parts := map[int]string{}
	for i := 0; i <= n; i++ {
		m := "\n" + stepMarker(i) + "\n"
		at := strings.Index(out, m)
		if at < 0 {
			break
		}
		rest := out[at+len(m):]
		if end := strings.Index(rest, "\n"+stepMarker(i+1)+"\n"); end >= 0 {
			rest = rest[:end]
		}
		parts[i] = rest
	}
	return parts
}

// withoutProgramsEnv drops the variables the programs and scripts read
// (EAI_*, EAIMQ_*): the page sets what it needs, as a newcomer's shell
// would.
func withoutProgramsEnv(env []string) []string {
	var keep []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "EAI_") || strings.HasPrefix(kv, "EAIMQ_") {
			continue
		}
		keep = append(keep, kv)
	}
	return keep
}
