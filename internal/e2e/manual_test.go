package e2e

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"eaimq/internal/brokertest"
)

var update = flag.Bool("update", false, "rewrite the README's manual sections from the programs' -h")

// programs are the ones whose manual the README carries.
var programs = []string{"topology", "publish", "consumer", "brokerstatus", "dlq", "claimsys"}

// TestManualsInREADME: each program's manual is its package comment (its
// doc.go, embedded and printed by -h), and the README's "Manuals" section
// carries the same text, so the three places a manual used to live cannot
// drift apart. `go test ./internal/e2e -run ManualsInREADME -update`
// rewrites the README's copies.
func TestManualsInREADME(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	readme := filepath.Join(filepath.Dir(file), "..", "..", "README.md")
	text, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	out := string(text)
	for _, p := range programs {
		cmd := exec.Command(brokertest.Binary(t, "eaimq/"+p), "-h")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || stdout.Len() == 0 || stderr.Len() != 0 {
			t.Errorf("%s -h: %v, %d bytes on stdout, stderr %q: want the manual on stdout and exit 0", p, err, stdout.Len(), stderr.String())
			continue
		}
		block := manualBlock(p, stdout.String())
		re := regexp.MustCompile(`(?s)<!-- manual: ` + p + ` -->.*?<!-- /manual -->`)
		switch have := re.FindString(out); {
		case have == block:
		case *update && have != "":
			out = strings.Replace(out, have, block, 1)
		case *update:
			out = strings.Replace(out, "<!-- /manuals -->", block+"\n\n<!-- /manuals -->", 1)
		case have == "":
			t.Errorf("README.md has no manual section for %s (go test ./internal/e2e -run ManualsInREADME -update adds it)", p)
		default:
			t.Errorf("README.md's manual of %s differs from %s -h (go test ./internal/e2e -run ManualsInREADME -update rewrites it)", p, p)
		}
	}
	if *update && out != string(text) {
		if !strings.Contains(out, "<!-- /manuals -->") {
			t.Fatal("README.md lacks the <!-- manuals --> ... <!-- /manuals --> markers where the manuals go")
		}
		if err := os.WriteFile(readme, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// manualBlock is one program's manual as the README holds it: folded, so
// that the README reads as a guide and the manuals are a click away.
func manualBlock(program, manual string) string {
	return fmt.Sprintf("<!-- manual: %s -->\n<details><summary><code>%s -h</code></summary>\n\n```text\n%s```\n\n</details>\n<!-- /manual -->",
		program, program, manual)
}
