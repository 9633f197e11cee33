package e2e

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"eaimq/internal/brokertest"
)

var update = flag.Bool("update", false, "rewrite docs/manuals/*.md from the programs' -h")

// programs are the ones with a manual in docs/manuals.
var programs = []string{"topology", "publish", "consumer", "brokerstatus", "dlq", "claimsys"}

// TestManualsInDocs: each program's manual is its package comment (its
// doc.go, embedded and printed by -h full), and docs/manuals/PROGRAM.md
// carries the same text, so the places a manual is read cannot drift
// apart.
// `go test ./internal/e2e -run ManualsInDocs -update` rewrites the copies.
func TestManualsInDocs(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "docs", "manuals")
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range programs {
		cmd := exec.Command(brokertest.Binary(t, "eaimq/"+p), "-h", "full")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || stdout.Len() == 0 || stderr.Len() != 0 {
			t.Errorf("%s -h full: %v, %d bytes on stdout, stderr %q: want the manual on stdout and exit 0", p, err, stdout.Len(), stderr.String())
			continue
		}
		want := manualPage(p, stdout.String())
		path := filepath.Join(dir, p+".md")
		have, err := os.ReadFile(path)
		switch {
		case err == nil && string(have) == want:
		case *update:
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
		case errors.Is(err, fs.ErrNotExist):
			t.Errorf("docs/manuals/%s.md is missing (go test ./internal/e2e -run ManualsInDocs -update writes it)", p)
		case err != nil:
			t.Errorf("docs/manuals/%s.md: %v", p, err)
		default:
			t.Errorf("docs/manuals/%s.md differs from %s -h full, %s (go test ./internal/e2e -run ManualsInDocs -update rewrites it)", p, p, firstDifference(string(have), want))
		}
	}
	// A manual left behind by a program that is gone would still be read
	// as current.
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !slices.Contains(programs, strings.TrimSuffix(e.Name(), ".md")) {
			t.Errorf("docs/manuals/%s is the manual of no program this test knows: delete it, or add the program to programs", e.Name())
		}
	}
}

// TestHelpLeadsWithFlags: -h is for a person in a terminal. Each
// program's starts with its usage, has its flags within the first
// screenful (24 lines), fits a tall terminal (at most 60 lines, where the
// manuals run to 120-330), and says how to read the whole manual.
func TestHelpLeadsWithFlags(t *testing.T) {
	t.Parallel()
	for _, p := range programs {
		bin := brokertest.Binary(t, "eaimq/"+p)
		out, err := exec.Command(bin, "-h").Output()
		if err != nil {
			t.Errorf("%s -h: %v", p, err)
			continue
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		usage, flags := slices.Index(lines, "Usage:"), slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "Flags") })
		if usage < 0 || usage > 6 || flags < 0 || flags > 24 || len(lines) > 60 {
			t.Errorf("%s -h: Usage at line %d, Flags at line %d, %d lines; want them within 6 and 24, and at most 60 lines", p, usage+1, flags+1, len(lines))
		}
		if !strings.Contains(string(out), "'"+p+" -h full | less'") {
			t.Errorf("%s -h does not say how to read the whole manual", p)
		}
	}
}

// manualPage is one program's manual as docs/manuals holds it: a heading,
// where the text comes from, and the text as -h prints it, fenced with
// more backticks than any run of them inside it.
func manualPage(program, manual string) string {
	fence := "```"
	for strings.Contains(manual, fence) {
		fence += "`"
	}
	return fmt.Sprintf("<!-- Generated from `%[1]s -h` by `go test ./internal/e2e -run ManualsInDocs -update`: edit %[1]s/doc.go, not this file. -->\n\n"+
		"# %[1]s\n\n"+
		"The manual `%[1]s -h` prints: the program's package comment, [`%[1]s/doc.go`](../../%[1]s/doc.go). "+
		"The other programs' manuals are beside this file; the [README](../../README.md) says what each program is for.\n\n"+
		"%[2]stext\n%[3]s%[2]s\n",
		program, fence, manual)
}

// firstDifference says where two texts part, for a failure message.
func firstDifference(have, want string) string {
	h, w := strings.Split(have, "\n"), strings.Split(want, "\n")
	for i := range min(len(h), len(w)) {
		if h[i] != w[i] {
			return fmt.Sprintf("first at line %d: has %q, -h gives %q", i+1, h[i], w[i])
		}
	}
	return fmt.Sprintf("%d lines against %d", len(h), len(w))
}
