package deadletter

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func qmark(int) string       { return "?" }
func dollar(n int) string    { return "$" + strconv.Itoa(n) }
func unixMS(t time.Time) any { return t.UnixMilli() }

// TestChangeArgumentsInTextOrder: with ? placeholders the arguments must
// be in the order of the text; with $n, each number names its argument.
// A change read once for both backends must hold for both.
func TestChangeArgumentsInTextOrder(t *testing.T) {
	at := time.UnixMilli(1000)
	stale := time.UnixMilli(500)
	c := Change{Seqs: []int64{7, 9}, From: []State{StateDead}, To: StateReplaying, By: "ann", Via: "dlq replay", At: at, StaleBefore: stale}
	for _, tc := range []struct {
		name string
		ph   func(int) string
	}{{"qmark", qmark}, {"dollar", dollar}} {
		t.Run(tc.name, func(t *testing.T) {
			set, args := c.Set(tc.ph, unixMS)
			where, args := c.Where(tc.ph, unixMS, args)
			text := set + " WHERE " + where
			want := []any{"replaying", "ann", "dlq replay", int64(1000), int64(7), int64(9), "dead", "replaying", int64(500)}
			if !reflect.DeepEqual(args, want) {
				t.Fatalf("args %v, want %v", args, want)
			}
			// Each argument's placeholder comes where its column is.
			if tc.name == "dollar" {
				for i, col := range []string{"state = $1", "state_by = $2", "state_via = $3", "state_at = $4", "seq IN ($5, $6)", "state IN ($7)", "state = $8 AND state_at < $9"} {
					if !strings.Contains(text, col) {
						t.Errorf("%d: %q not in %s", i, col, text)
					}
				}
			} else if strings.Count(text, "?") != len(want) {
				t.Errorf("%d placeholders for %d args: %s", strings.Count(text, "?"), len(want), text)
			} else if strings.Index(text, "seq IN") > strings.Index(text, "state IN") {
				t.Errorf("the seqs' placeholders come after the states': %s", text)
			}
		})
	}
}

func TestQueryStatesAndThrough(t *testing.T) {
	where, args := Query{After: 3, Through: 10, States: Live}.Where(qmark, nil)
	if want := "seq > ? AND seq <= ? AND state IN (?, ?)"; where != want {
		t.Errorf("where %q, want %q", where, want)
	}
	if want := []any{int64(3), int64(10), "dead", "replaying"}; !reflect.DeepEqual(args, want) {
		t.Errorf("args %v, want %v", args, want)
	}
	// With a narrower condition the state is no index's (show's IDs read
	// by the index of claimIds, not by the states').
	where, _ = Query{IDs: []string{"C-1"}, Through: 10, States: Live}.Where(qmark, nil)
	if want := "(message_id = ? OR claim_id = ?) AND seq <= ? AND state || '' IN (?, ?)"; where != want {
		t.Errorf("where %q, want %q", where, want)
	}
}

func TestWords(t *testing.T) {
	body := []byte(`{"guid":"G-1","claimId":"BUSY-0","note":"Überweisung fehlt, BUSY again","bad":"` + "\xff" + `"}`)
	want := []string{"guid", "g", "1", "claimid", "busy", "0", "note", "Überweisung", "fehlt", "again", "bad", "\xff"}
	if got := Words(body); !reflect.DeepEqual(got, want) {
		t.Errorf("Words: %q, want %q", got, want)
	}
	long := []byte(strings.Repeat("w ", 3) + func() string {
		var b strings.Builder
		for i := range MaxWords + 5 {
			if i == 3 {
				b.WriteString(strings.Repeat("y", 2*MaxWordBytes) + " ")
			}
			b.WriteString("x" + strconv.Itoa(i) + " ")
		}
		return b.String()
	}())
	if got := Words(long); len(got) != MaxWords+1 || got[MaxWords] != AllWords || !slices.Contains(got, strings.Repeat("y", MaxWordBytes)) {
		t.Errorf("Words of a long body: %d words, the last %q; want %d and %q, and the long word cut", len(got), got[len(got)-1], MaxWords+1, AllWords)
	}
}

// TestWordsAsBefore: words without an allocation a repeated word gives
// the words the first version gave, one string and one lower-cased copy
// for each occurrence (wordsRef).
func TestWordsAsBefore(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		parts := rapid.SliceOf(rapid.SampledFrom([]string{"a", "A", "b", "Bb", "0", " ", ",", "\"", "\xff", "é", "É", "x1", "X1", "-"})).Draw(t, "parts")
		b := []byte(strings.Join(parts, ""))
		max := rapid.IntRange(0, 5).Draw(t, "max")
		if got, want := words(b, max), wordsRef(b, max); !slices.Equal(got, want) {
			t.Fatalf("words(%q, %d) = %q, want %q", b, max, got, want)
		}
	})
}

// TestJoinerAsTextWords: a Joiner gives TextWords joined by spaces, body
// after body with the buffers of the one before.
func TestJoinerAsTextWords(t *testing.T) {
	var j Joiner
	rapid.Check(t, func(t *rapid.T) {
		for _, b := range rapid.SliceOfN(rapid.SliceOf(rapid.SampledFrom([]string{"a", "A", "b", "Bb", "0", " ", ",", "\"", "\xff", "\x00",
			"é", "É", "x1", "X1", "-", "LONGWORD"})), 1, 4).Draw(t, "bodies") {
			body := []byte(strings.Join(b, ""))
			if got, want := string(j.Join(body)), strings.Join(TextWords(string(body)), " "); got != want {
				t.Fatalf("Join(%q) = %q, want %q", body, got, want)
			}
		}
	})
}

func wordsRef(b []byte, max int) []string {
	seen := map[string]bool{}
	var out []string
	for i := 0; i < len(b) && (max <= 0 || len(out) < max); {
		if !wordByte(b[i]) {
			i++
			continue
		}
		j := i
		for j < len(b) && wordByte(b[j]) {
			j++
		}
		w := string(asciiLower(b[i:j]))
		i = j
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

func TestHasText(t *testing.T) {
	body := []byte(`{"guid":"g-1","claimId":"BUSY-0","note":"Überweisung fehlt"}`)
	for _, c := range []struct {
		text string
		want bool
	}{
		{"", true},
		{"busy-0", true},          // letter case aside
		{`"claimId":"BUSY`, true}, // the words claimid and busy
		{"USY-0", false},          // usy is not a word of the body
		{"busy 0", false},         // not the body's bytes
		{"Überweisung", true},
		{"überweisung", false}, // only ASCII letters' case is aside
		{"fehlt!", false},
	} {
		if got := HasText(body, c.text); got != c.want {
			t.Errorf("HasText(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}

// TestWhere: one reading of a query for both backends. The first page
// and a count of all carry no condition on seq: SQLite counted a million
// rows by walking the table itself when they said "seq > 0".
func TestWhere(t *testing.T) {
	q := func(n int) string { return "?" }
	d := func(n int) string { return "$" + strconv.Itoa(n) }
	for _, tc := range []struct {
		q     Query
		ph    func(int) string
		where string
		args  []any
	}{
		{Query{}, q, "TRUE", nil},
		{Query{Limit: 50}, q, "TRUE", nil},
		{Query{After: 500}, q, "seq > ?", []any{int64(500)}},
		{Query{IDs: []string{"a", "b"}}, d, "(message_id = $1 OR claim_id = $2 OR message_id = $3 OR claim_id = $4)", []any{"a", "a", "b", "b"}},
		{Query{After: 7, Reason: "rejected", Status: -1, BrokerReason: "expired"}, d,
			"seq > $1 AND reason = $2 AND status = 0 AND broker_reason = $3", []any{int64(7), "rejected", "expired"}},
		{Query{Status: 422}, q, "status = ?", []any{422}},
	} {
		where, args := tc.q.Where(tc.ph, nil)
		if where != tc.where || !reflect.DeepEqual(args, tc.args) {
			t.Errorf("%+v: %q %v, want %q %v", tc.q, where, args, tc.where, tc.args)
		}
	}
}

// TestLeanColumns: a lean read selects Columns in their order, the
// properties and the body as empty values under their names, and a
// whole read Columns as they are.
func TestLeanColumns(t *testing.T) {
	if got := LeanColumns(Query{}, "x''"); got != Columns {
		t.Errorf("whole: %q", got)
	}
	split := func(s string) []string {
		var cs []string
		for _, c := range strings.Split(s, ",") {
			cs = append(cs, strings.TrimSpace(c))
		}
		return cs
	}
	whole, lean := split(Columns), split(LeanColumns(Query{Lean: true}, "x''"))
	if len(whole) != len(lean) {
		t.Fatalf("lean columns %q, whole %q", lean, whole)
	}
	for i, c := range whole {
		want := c
		switch c {
		case "properties":
			want = "'' AS properties"
		case "body":
			want = "x'' AS body"
		}
		if lean[i] != want {
			t.Errorf("column %d: %q, want %q", i, lean[i], want)
		}
	}
}
