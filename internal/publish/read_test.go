package publish

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadClaimDirectory(t *testing.T) {
	var buf []byte
	if c := readClaim(context.Background(), t.TempDir(), nil, 100, &buf, nil); c.err == nil || !strings.Contains(c.err.Error(), "directory") {
		t.Errorf("a directory: err %v", c.err)
	}
}

// A regular file keeps only its name, size, guid and checksum; what cannot
// be read twice keeps its bytes.
func TestReadClaimKeepsOnlyWhatCannotBeReadAgain(t *testing.T) {
	dir := t.TempDir()
	body := `{"guid":"k1"}`
	f := writeClaim(t, dir, "c.json", body)
	var buf []byte
	c := readClaim(context.Background(), f, nil, 100, &buf, nil)
	if c.err != nil || c.guid != "k1" || c.size != len(body) || c.body != nil {
		t.Errorf("regular file: %+v", c)
	}
	c = readClaim(context.Background(), "-", strings.NewReader(body), 100, &buf, nil)
	if c.err != nil || string(c.body) != body {
		t.Errorf("stdin: %+v", c)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			io.WriteString(w, body)
			w.Close()
		}
	}()
	c = readClaim(context.Background(), fifo, nil, 100, &buf, nil)
	if c.err != nil || string(c.body) != body {
		t.Errorf("FIFO: %+v", c)
	}
}

func TestReadLimited(t *testing.T) {
	src := strings.Repeat("y", 100)
	for _, size := range []int64{-1, 100, 7} { // unknown, exact, wrong (a file that grew)
		got, err := readLimited(context.Background(), strings.NewReader(src), 1000, size, nil)
		if err != nil || string(got) != src {
			t.Errorf("size %d: %q %v", size, got, err)
		}
	}
	got, err := readLimited(context.Background(), strings.NewReader(src), 51, -1, nil)
	if err != nil || len(got) != 51 {
		t.Errorf("limit 51: read %d, %v", len(got), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := readLimited(ctx, strings.NewReader(src), 1000, -1, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("after cancel: %v", err)
	}
}

func TestRereadNoticesAChange(t *testing.T) {
	dir := t.TempDir()
	f := writeClaim(t, dir, "c.json", `{"guid":"r1"}`)
	var buf []byte
	c := readClaim(context.Background(), f, nil, 100, &buf, nil)
	if c.err != nil {
		t.Fatal(c.err)
	}
	if body, err := reread(context.Background(), &c, nil); err != nil || string(body) != `{"guid":"r1"}` {
		t.Fatalf("unchanged: %q %v", body, err)
	}
	writeClaim(t, dir, "c.json", `{"guid":"r2"}`) // same size, other bytes
	if _, err := reread(context.Background(), &c, nil); !errors.Is(err, errChanged) {
		t.Errorf("same size, other bytes: %v", err)
	}
	writeClaim(t, dir, "c.json", `{"guid":"r1"} `)
	if _, err := reread(context.Background(), &c, nil); !errors.Is(err, errChanged) {
		t.Errorf("grown: %v", err)
	}
	os.Remove(f)
	if _, err := reread(context.Background(), &c, nil); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("gone: %v", err)
	}
}

func writeClaim(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
