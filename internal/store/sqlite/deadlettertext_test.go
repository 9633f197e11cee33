package sqlite

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"eaimq/internal/store/deadletter"
)

// textRow is a dead letter of body for these tests.
func textRow(key, body string) deadletter.Row {
	return deadletter.Row{CopyKey: key, MessageID: key, Reason: "rejected", Properties: []byte("{}"), Headers: []byte("{}"),
		Body: []byte(body), IngestedAt: time.Now()}
}

// textFinds is the message ids of the rows -text finds, by the index.
func textFinds(t *testing.T, s *Store, text string) []string {
	t.Helper()
	got, err := s.DeadLetters(ctx, deadletter.Query{Text: text, States: deadletter.Live})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.MessageID)
	}
	return ids
}

// TestDeadLetterWordsLeaveWithTheirRow: the word index keeps no copy of
// the words (migrate9) and a delete reads them back from the body, so a
// deleted row's words must all leave with it, a body with a NUL byte
// too (FTS4 reads text only up to it): SQLite gives the largest seq
// deleted to the next row, and a word left under it would find that row.
func TestDeadLetterWordsLeaveWithTheirRow(t *testing.T) {
	for name, body := range map[string]string{
		"text":     `{"note":"Gamma delta EPSILON gamma"}`,
		"nul byte": "gamma\x00delta EPSILON \x00",
		"binary":   "\xff\xfegamma\x00\x01delta\x80 epsilon",
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t, filepath.Join(t.TempDir(), "processed.db"), Options{})
			if _, err := s.PutDeadLetters(ctx, []deadletter.Row{textRow("a", "alpha beta"), textRow("b", body)}); err != nil {
				t.Fatal(err)
			}
			if got := textFinds(t, s, "epsilon"); len(got) != 1 || got[0] != "b" {
				t.Fatalf("-text epsilon before the delete: %v, want [b]", got)
			}
			b, err := s.DeadLetters(ctx, deadletter.Query{IDs: []string{"b"}, States: deadletter.Live})
			if err != nil || len(b) != 1 {
				t.Fatalf("row b: %v %v", b, err)
			}
			if _, err := s.ChangeDeadLetters(ctx, deadletter.Change{Seqs: []int64{b[0].Seq}, From: deadletter.Live}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.PutDeadLetters(ctx, []deadletter.Row{textRow("c", "zeta")}); err != nil {
				t.Fatal(err)
			}
			c, err := s.DeadLetters(ctx, deadletter.Query{IDs: []string{"c"}, States: deadletter.Live})
			if err != nil || len(c) != 1 || c[0].Seq != b[0].Seq {
				t.Fatalf("row c: %+v %v, want b's seq %d again (what makes a word left behind wrong)", c, err, b[0].Seq)
			}
			for _, w := range []string{"gamma", "delta", "epsilon"} {
				if got := textFinds(t, s, w); len(got) != 0 {
					t.Errorf("-text %s after b's delete finds %v", w, got)
				}
			}
			if got := textFinds(t, s, "zeta"); len(got) != 1 || got[0] != "c" {
				t.Errorf("-text zeta: %v, want [c]", got)
			}
			var n int
			if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM dead_letter_nul_words`).Scan(&n); err != nil || n != 0 {
				t.Errorf("%d rows left in dead_letter_nul_words (%v)", n, err)
			}
		})
	}
}

// TestMigratesWordsOfVersion8: a file of version 8, its words in an FTS4
// table with content, becomes version 9 with each row found by the same
// words, and a delete, of a body with a NUL byte too, takes them all.
func TestMigratesWordsOfVersion8(t *testing.T) {
	path, db, tx := fileAtVersion(t, 8)
	bodies := []string{`{"guid":"old-1","claimId":"BUSY-9"}`, "busy\x00tail words", `{"note":"Tail"}`}
	for i, b := range bodies {
		res, err := tx.Exec(`INSERT INTO dead_letters (copy_key, message_id, reason, properties, headers, body, ingested_at)
			VALUES (?, ?, 'rejected', '{}', '{}', ?, 1)`, fmt.Sprint("c", i), fmt.Sprint("old-", i), []byte(b))
		if err != nil {
			t.Fatal(err)
		}
		seq, _ := res.LastInsertId()
		if _, err := tx.Exec(insertWords, seq, wordsOf([]byte(b))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(`PRAGMA user_version = 8`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s := open(t, path, Options{})
	for text, want := range map[string]string{"busy-9": "[old-0]", "tail": "[old-1 old-2]", "words": "[old-1]", "busy": "[old-0 old-1]"} {
		if got := fmt.Sprint(textFinds(t, s, text)); got != want {
			t.Errorf("-text %s after the migration: %s, want %s", text, got, want)
		}
	}
	// The NUL body is the largest seq: deleted, its seq comes again.
	if _, err := s.ChangeDeadLetters(ctx, deadletter.Change{Seqs: []int64{2, 3}, From: deadletter.Live}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutDeadLetters(ctx, []deadletter.Row{textRow("new-2", "other"), textRow("new-3", "more")}); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"tail", "words"} {
		if got := textFinds(t, s, text); len(got) != 0 {
			t.Errorf("-text %s after the delete: %v", text, got)
		}
	}
	if got := fmt.Sprint(textFinds(t, s, "busy")); got != "[old-0]" {
		t.Errorf("-text busy after the delete: %s, want [old-0]", got)
	}
}
