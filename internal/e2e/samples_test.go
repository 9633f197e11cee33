package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/rabbitctl"
)

// The samples of output in README.md and docs/ are checked here against
// what the programs print, so that a changed output fails a test until the
// text shows the new one. docs/tutorial.md has its own test
// (tutorial_test.go), which runs its commands.

// TestReadmeShowsTheDemoReport runs scripts/demo.sh as a newcomer would
// and compares its report with the README's: every line, up to what
// inAnyOrder lets vary (the run's own vhost name, the order of the
// queues, which rabbitmqctl lists as it finds them).
//
// Serial: the demo builds into the repository's bin/, as the tutorial
// test does, and its consumer runs for a bounded time, which a loaded
// machine stretches (EAIMQ_DEMO_SECONDS gives it 8 s here, not 4; the
// report does not show it). It runs on this machine's broker, as the
// demo does, whatever EAIMQ_TEST_AMQP_URL says.
func TestReadmeShowsTheDemoReport(t *testing.T) {
	top := repoTop()
	want := oneBlockStarting(t, "README.md", "== report\n")
	ctl := rabbitctl.Ctl{Node: rabbitctl.LabNode}
	if _, err := ctl.Run(context.Background(), "-q", "eval", "node()."); err != nil {
		t.Fatalf("the demo needs RabbitMQ as node %s: %v; start it with scripts/mq-up.sh", rabbitctl.LabNode, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(top, "scripts", "demo.sh"))
	cmd.Dir = top
	cmd.Env = append(withoutProgramsEnv(os.Environ()), fmt.Sprintf("EAIMQ_DEMO_PORT=%d", freePort(t)), "EAIMQ_DEMO_SECONDS=8")
	var stderr brokertest.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/demo.sh: %v\n%s\n-- stderr:\n%s", err, out, stderr.String())
	}
	at := strings.Index(string(out), "\n== report\n")
	if at < 0 {
		t.Fatalf("scripts/demo.sh printed no report:\n%s", out)
	}
	got := string(out[at+1:])
	if inAnyOrder(got) != inAnyOrder(want) {
		t.Errorf("README.md's demo report is not what scripts/demo.sh prints: update the README.\n-- README shows:\n%s\n-- the demo printed:\n%s", want, got)
	}
}

// TestReadmeNamesTheDemoPort: the demo's claim system listens on a fixed
// port, and a newcomer whose port is taken must find, in the README, the
// variable that moves it and the default it has.
func TestReadmeNamesTheDemoPort(t *testing.T) {
	t.Parallel()
	top := repoTop()
	demo, err := os.ReadFile(filepath.Join(top, "scripts", "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`port=\$\{EAIMQ_DEMO_PORT:-(\d+)\}`).FindSubmatch(demo)
	if m == nil {
		t.Fatal("scripts/demo.sh: no port=${EAIMQ_DEMO_PORT:-N} line; this test reads the default there")
	}
	for _, doc := range []string{"README.md", "docs/environment.md"} {
		text, err := os.ReadFile(filepath.Join(top, doc))
		if err != nil {
			t.Fatal(err)
		}
		if !brokertest.ContainsAll(string(text), "EAIMQ_DEMO_PORT", string(m[1])) {
			t.Errorf("%s does not name EAIMQ_DEMO_PORT and its default %s (scripts/demo.sh)", doc, m[1])
		}
	}
}

// TestDocsShowDlqList makes the dead letters of the docs' `dlq list`
// sample (a 422, a 503 twice, a partner that cannot be reached) with the
// installed programs, and compares what `dlq list` prints with every such
// sample in README.md and docs/ (the tutorial's has its own test). The
// claims are dead-lettered one at a time, so that claim.dead holds them in
// the sample's order.
func TestDocsShowDlqList(t *testing.T) {
	t.Parallel()
	var samples []docBlock
	for _, doc := range docPages(t) {
		if strings.HasSuffix(doc, "tutorial.md") {
			continue
		}
		for _, b := range blocksOf(t, doc) {
			if strings.HasPrefix(b.text, "MESSAGE_ID ") {
				samples = append(samples, b)
			}
		}
	}
	if len(samples) < 2 {
		t.Fatalf("found %d samples of dlq list in the docs; docs/operations.md and docs/programs.md each show one", len(samples))
	}

	w := newWorld(t)
	deadLetter := func(claimURL string, claim []byte, depth int) {
		c := w.start("consumer.py", "--claim", claimURL, "--max-seconds", "120")
		w.publishFiles(claim)
		brokertest.Eventually(t, 30*time.Second, fmt.Sprintf("claim.dead holds %d", depth), func() bool {
			return w.vh.Depth(t, "claim.dead") == depth
		})
		c.stop(t)
	}
	deadLetter(w.url, brokertest.Claim("nodocs-1", "C-2026-0005"), 1)
	deadLetter(w.url, brokertest.Claim("busy-1", "BUSY-2026-0007", "receipt.pdf"), 2)
	deadLetter(fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), brokertest.Claim("down-1", "C-2026-0009", "receipt.pdf"), 3)

	r := w.run("dlq", "list")
	if r.code != 0 {
		t.Fatalf("dlq list: exit %d: %s", r.code, r.stderr)
	}
	for _, b := range samples {
		if docVariable(b.text) != docVariable(r.stdout) {
			t.Errorf("%s:%d: the dlq list sample is not what dlq list prints for its claims.\n-- the doc shows:\n%s\n-- dlq list printed:\n%s", b.file, b.line, b.text, r.stdout)
		}
	}
	// The same dead letters are the ones docs/programs.md purges and
	// restores.
	w.checkTranscript(oneBlockStarting(t, "docs/programs.md", "$ dlq -yes purge "), t.TempDir())
}

// TestDocsShowPublishTranscript runs docs/programs.md's publish
// transcript (a file whose guid holds the byte 0xff refuses the whole
// run; then three claims sent) with the files it names.
func TestDocsShowPublishTranscript(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	dir := t.TempDir()
	files := map[string][]byte{
		"bad.json":      []byte("{\"guid\":\"bad-\xff\"}"),
		"good-1.json":   brokertest.Claim("good-1", "C-2026-0001", "receipt.pdf"),
		"nodocs-1.json": brokertest.Claim("nodocs-1", "C-2026-0005"),
		"busy-1.json":   brokertest.Claim("busy-1", "BUSY-2026-0007", "receipt.pdf"),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w.checkTranscript(oneBlockStarting(t, "docs/programs.md", "$ publish bad.json "), dir)
}

// checkTranscript runs a block of "$ COMMAND" lines, each followed by
// what it prints (stdout and stderr, in any order: a terminal interleaves
// them as they come), with the installed programs in dir. "$ echo $?" is
// followed by the exit status of the command before it. A comment after
// a command ("  # ...") is the doc's, not an argument.
func (w *world) checkTranscript(text, dir string) {
	t := w.t
	t.Helper()
	type step struct {
		line string
		want strings.Builder
	}
	var steps []*step
	for _, l := range strings.SplitAfter(text, "\n") {
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			steps = append(steps, &step{line: strings.TrimSpace(cmd)})
		} else if len(steps) > 0 {
			steps[len(steps)-1].want.WriteString(l)
		} else if strings.TrimSpace(l) != "" {
			t.Fatalf("transcript starts with output, not a $ command:\n%s", text)
		}
	}
	status := -1
	for _, s := range steps {
		if s.line == "echo $?" {
			if got := fmt.Sprint(status); got != strings.TrimSpace(s.want.String()) {
				t.Errorf("transcript shows exit status %q, the command exited %s:\n%s", strings.TrimSpace(s.want.String()), got, text)
			}
			continue
		}
		cmdline, _, _ := strings.Cut(s.line, "  #")
		args := strings.Fields(cmdline)
		cmd := exec.Command(filepath.Join(w.bin, args[0]), args[1:]...)
		cmd.Dir, cmd.Env = dir, w.env()
		out, err := cmd.CombinedOutput()
		status = 0
		if ee, ok := err.(*exec.ExitError); ok {
			status = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", s.line, err)
		}
		if inAnyOrder(string(out)) != inAnyOrder(s.want.String()) {
			t.Errorf("$ %s prints something else than the transcript shows.\n-- the doc shows:\n%s\n-- it printed:\n%s", s.line, s.want.String(), out)
		}
	}
}

var (
	timeOfDay   = regexp.MustCompile(`\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?Z?`)
	duration    = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m|h)\b`)
	concurrency = regexp.MustCompile(`max concurrency \d+`)
	demoVhost   = regexp.MustCompile(`eaimq-demo-\d+-\d+`)
)

// docVariable is an output with what may differ from one run to the next
// made equal: a time of day, a duration, the stand-in's most calls at
// once (how the calls overlapped), and the demo's vhost name (the run's
// own). Any other change to a line shows. Blank lines and trailing blanks
// do not count.
func docVariable(s string) string {
	s = timeOfDay.ReplaceAllString(s, "<time>")
	s = duration.ReplaceAllString(s, "<duration>")
	s = concurrency.ReplaceAllString(s, "max concurrency <n>")
	s = demoVhost.ReplaceAllString(s, "eaimq-demo-<run>")
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimRight(l, " \t"); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// inAnyOrder is docVariable with the order of the lines not counted:
// rabbitmqctl lists queues in the order it finds them, and claims settled
// at the same time reach claim.dead in either order.
func inAnyOrder(s string) string {
	lines := strings.Split(docVariable(s), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// repoTop is the repository's top directory.
func repoTop() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// docPages are README.md and docs/*.md (not the generated manuals).
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoTop(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(repoTop(), "README.md")}, pages...)
}

// docBlock is one fenced block of a Markdown page.
type docBlock struct {
	file string
	info string // what follows the opening fence: sh, text, ...
	text string // the lines inside, each ending in a newline
	line int    // of the first line inside, 1-based
	// start and end are the indexes of the fence lines; prev, of the
	// last line before start that is not blank (-1 if none): a block
	// whose prev is another's end follows it with nothing between.
	start, end, prev int
}

func blocksOf(t *testing.T, path string) []docBlock {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blocks := fencedBlocks(string(text))
	rel, _ := filepath.Rel(repoTop(), path)
	for i := range blocks {
		blocks[i].file = rel
	}
	return blocks
}

// fencedBlocks finds the ``` blocks of a page (fences of three backticks
// at the start of a line; a longer fence closes only with its own length).
func fencedBlocks(doc string) []docBlock {
	lines := strings.Split(doc, "\n")
	var blocks []docBlock
	prev := -1
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "```") {
			if strings.TrimSpace(l) != "" {
				prev = i
			}
			continue
		}
		fence := l[:len(l)-len(strings.TrimLeft(l, "`"))]
		b := docBlock{info: strings.TrimSpace(l[len(fence):]), start: i, line: i + 2, prev: prev}
		var body strings.Builder
		for i++; i < len(lines) && strings.TrimRight(lines[i], " ") != fence; i++ {
			body.WriteString(lines[i] + "\n")
		}
		b.text, b.end = body.String(), i
		blocks = append(blocks, b)
		prev = i
	}
	return blocks
}

// oneBlockStarting is the text of the one block of page (relative to the
// repository) that starts with prefix.
func oneBlockStarting(t *testing.T, page, prefix string) string {
	t.Helper()
	var found []string
	for _, b := range blocksOf(t, filepath.Join(repoTop(), page)) {
		if strings.HasPrefix(b.text, prefix) {
			found = append(found, b.text)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d blocks start with %q; want one", page, len(found), prefix)
	}
	return found[0]
}
