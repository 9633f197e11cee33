package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"eaimq/internal/pgtest"
)

func entry(i int, ids ...string) Entry {
	return Entry{At: time.Date(2026, 12, 1, 9, 0, i, 0, time.UTC), Who: "alice", Via: "dlq replay", Action: "replay",
		Target: "-all", IDs: ids, Result: Done}
}

// trails is each kind of trail, on a store of its own.
func trails(t *testing.T) map[string]Trail {
	t.Helper()
	ctx := context.Background()
	out := map[string]Trail{}
	db := filepath.Join(t.TempDir(), "processed.db")
	f, err := Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	out["file"] = f
	pg, err := Open(ctx, pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	out["postgres"] = pg
	return out
}

// TestTrail: entries come back as written, oldest first, every one or
// those that name an id (acted on or not); a trail nothing was written to
// has no entry (and reading it creates nothing).
func TestTrail(t *testing.T) {
	ctx := context.Background()
	for kind, tr := range trails(t) {
		t.Run(kind, func(t *testing.T) {
			var none []Entry
			if err := tr.Entries(ctx, "", func(e Entry) error { none = append(none, e); return nil }); err != nil || len(none) != 0 {
				t.Fatalf("empty trail: %v %v", none, err)
			}
			if err := tr.Check(ctx); err != nil {
				t.Fatal(err)
			}
			e2 := entry(2, "b")
			e2.NotDone = []NotDone{{ID: "a", Why: "skipped: delivered"}}
			e2.Result, e2.Error = Partial, "boom"
			e3 := entry(3, `quote"d`)
			e3.Action, e3.Edit = "edit", &Edit{PreviousSHA256: "00", SHA256: "11", IdempotencyKey: `quote"d+edit.0011223344556677`}
			for _, e := range []Entry{entry(1, "a", "b"), e2, e3} {
				if err := tr.Append(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range []struct {
				id   string
				want []int // seconds of the entries
			}{{"", []int{1, 2, 3}}, {"a", []int{1, 2}}, {"b", []int{1, 2}}, {`quote"d`, []int{3}}, {"c", nil}, {"quote", nil}} {
				var got []int
				err := tr.Entries(ctx, c.id, func(e Entry) error { got = append(got, e.At.Second()); return nil })
				if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Errorf("Entries(%q) = %v %v, want %v", c.id, got, err, c.want)
				}
			}
			var back Entry
			tr.Entries(ctx, "a", func(e Entry) error {
				if e.At.Second() == 2 {
					back = e
				}
				return nil
			})
			if back.Error != "boom" || back.Result != Partial || len(back.NotDone) != 1 || back.Who != "alice" || back.Edit != nil {
				t.Errorf("entry 2 read back as %+v", back)
			}
		})
	}
}

// TestEntryJSON: a line has every field, null where there is none.
func TestEntryJSON(t *testing.T) {
	b, err := json.Marshal(Entry{At: time.Unix(0, 0), Who: "w", Via: "dlq purge", Action: "purge", Result: Nothing})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"at":"1970-01-01T00:00:00Z","who":"w","via":"dlq purge","action":"purge","target":"","ids":[],"not_done":[],"result":"nothing","error":null,"edit":null,"archive":null}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

// TestFileMode: the file is created 0600 and a file made wider by hand is
// narrowed again; concurrent appends (two processes) never mix lines.
func TestFileMode(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "processed.db")
	tr, _ := Open(ctx, db)
	if err := tr.Check(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(FilePath(db))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v, want 0600", st.Mode(), err)
	}
	os.Chmod(FilePath(db), 0o644)
	var wg sync.WaitGroup
	long := strings.Repeat("x", 100<<10) // a line longer than a pipe's atomic write
	for g := range 8 {
		wg.Go(func() {
			other, _ := Open(ctx, db)
			for i := range 20 {
				if err := other.Append(ctx, entry(i, fmt.Sprintf("g%d-%d", g, i), long)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if st, _ := os.Stat(FilePath(db)); st.Mode().Perm() != 0o600 {
		t.Errorf("mode after appends %v, want 0600", st.Mode())
	}
	h, _ := os.Open(FilePath(db))
	defer h.Close()
	sc := bufio.NewScanner(h)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || len(e.IDs) != 2 || e.IDs[1] != long {
			t.Fatalf("line %d is not one whole entry: %v", n+1, err)
		}
		n++
	}
	if n != 160 {
		t.Errorf("%d lines, want 160", n)
	}
}

// TestTableCreatedOnce: two trails checking at once both succeed (the
// advisory lock), and the table is there afterwards.
func TestTableCreatedOnce(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			tr, err := Open(ctx, url)
			if err != nil {
				t.Error(err)
				return
			}
			defer tr.Close()
			if err := tr.Check(ctx); err != nil {
				t.Error(err)
			}
			if err := tr.Append(ctx, entry(1, "x")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	tr, _ := Open(ctx, url)
	defer tr.Close()
	n := 0
	tr.Entries(ctx, "x", func(Entry) error { n++; return nil })
	if n != 4 {
		t.Errorf("%d entries, want 4", n)
	}
	if w := tr.Where(); !strings.HasPrefix(w, Table+" in postgres://") {
		t.Errorf("Where() = %q", w)
	}
}
