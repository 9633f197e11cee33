package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"eaimq/internal/claimid"
	"eaimq/internal/cli"
	"eaimq/internal/topo"
)

// TestFaultBadInputGuids: claims whose guids differ only in invalid UTF-8
// bytes or lone surrogate escapes, which a normalising JSON decoder turns
// into one message_id (U+FFFD) and the consumer then drops as duplicates,
// published with valid claims that differ only in their exact characters.
// The invalid ones are refused at the door: without -keep-going nothing of
// the batch is published (exit 65); with it only the valid ones are, each
// under its exact guid, and every one of those is delivered once.
func TestFaultBadInputGuids(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	claim := func(guidJSON, claimID string) []byte {
		return []byte(fmt.Sprintf(`{"guid":"%s","claimId":"%s","docs":["receipt.pdf"],"amount":1200}`, guidJSON, claimID))
	}
	valid := [][]byte{
		claim(`door-\ufffd`, "C-door-1"), // a real U+FFFD: what \ud800 became before
		claim(`door-\u00e9`, "C-door-2"),
		claim(`door-\u00e8`, "C-door-3"),
		claim(`door-\ud83d\ude00`, "C-door-4"), // a surrogate pair is one character
		claim("door-\xc3\xa9-raw", "C-door-5"),
		claim(`door-plain`, "C-door-6"),
	}
	invalid := [][]byte{
		claim(`door-\ud800`, "C-bad-1"),
		claim(`door-\udbff`, "C-bad-2"),
		claim(`door-\udc00`, "C-bad-3"),
		claim("door-\xff", "C-bad-4"),
		claim("door-\xfe", "C-bad-5"),
		claim(`door-\n`, "C-bad-6"),
		claim(`door-\u0000`, "C-bad-7"),
		[]byte(`{"guid":"door-dup","guid":"door-dup2","claimId":"C-bad-8","docs":["receipt.pdf"]}`),
	}
	dir := t.TempDir()
	var files, published []string
	for i := range max(len(valid), len(invalid)) {
		for _, set := range []struct {
			kind   string
			claims [][]byte
		}{{"ok", valid}, {"bad", invalid}} {
			if i >= len(set.claims) {
				continue
			}
			f := filepath.Join(dir, fmt.Sprintf("%s%02d.json", set.kind, i))
			if err := os.WriteFile(f, set.claims[i], 0o644); err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
			if set.kind == "ok" {
				g, err := claimid.Guid(set.claims[i])
				if err != nil {
					t.Fatalf("valid claim %s: %v", set.claims[i], err)
				}
				published = append(published, g)
			}
		}
	}

	r := w.run("publish.py", files...)
	if r.code != cli.ExitDataErr {
		t.Fatalf("publish.py: exit %d, want %d: %s%s", r.code, cli.ExitDataErr, r.stdout, r.stderr)
	}
	for i := range invalid {
		if f := fmt.Sprintf("bad%02d.json", i); !strings.Contains(r.stderr, f) {
			t.Errorf("stderr does not name %s:\n%s", f, r.stderr)
		}
	}
	if n := w.vh.Depth(t, topo.Queue); n != 0 {
		t.Fatalf("a refused batch published %d claim(s)", n)
	}

	r = w.run("publish.py", append([]string{"-keep-going"}, files...)...)
	want := fmt.Sprintf("%d sent, 0 returned, 0 nacked, %d invalid", len(valid), len(invalid))
	if r.code != cli.ExitDataErr || !strings.Contains(r.stdout, want) {
		t.Fatalf("publish.py -keep-going: exit %d, want %d and %q: %s%s", r.code, cli.ExitDataErr, want, r.stdout, r.stderr)
	}
	w.drainWith()
	st := w.partner.Stats()
	for _, g := range published {
		if st.Accepted[g] != 1 {
			t.Errorf("%q accepted %d times, want 1", g, st.Accepted[g])
		}
	}
	w.account("guids differing only in invalid bytes or lone surrogates", published, 0, "0",
		fmt.Sprintf("%d refused at the door (exit 65), %d valid delivered once", len(invalid), len(valid)))
}
