package dlqcli

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"eaimq/internal/claim"
	"eaimq/internal/dlq"
)

// TestRowJSON: a row's JSON has every field, null where there is none,
// and reads back as the same row (a script reads list -json's lines).
func TestRowJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, r := range []Row{
		{MessageID: "m-0", Reason: "unknown", OurReason: "unknown (no record in the store)"},
		{MessageID: "m-1", ClaimID: "C-1", DeadAt: at, FromQueue: "claim.in", Broker: "rejected", Count: 2, Reason: "rejected",
			DeadReason: "rejected by the claim system", Recorded: true, State: "dead", Status: 422, Excerpt: "documents missing",
			Attempts: 1, OurReason: "422: rejected by the claim system", Replays: 1, Deliveries: 3,
			Edit: &dlq.Edited{At: at, By: "ann", Via: "dlq edit"}, Purged: &dlq.Purged{At: at, By: "bob", Via: "dlq purge"},
			hasDeath: true, hasDeliveries: true},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]any
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatal(err)
		}
		if len(fields) != 19 {
			t.Errorf("%s: %d fields, want all 19: %s", r.MessageID, len(fields), b)
		}
		if r.ClaimID == "" && (fields["claim_id"] != nil || fields["broker_count"] != nil || fields["attempts"] != nil) {
			t.Errorf("%s: fields it has none of are not null: %s", r.MessageID, b)
		}
		var back Row
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, r) {
			t.Errorf("%s: read back as\n%+v\nwant\n%+v", r.MessageID, back, r)
		}
	}
}

// TestAnswerOf: the table's answer is a JSON error body's message, else
// the answer as it came.
func TestAnswerOf(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"error":"documents missing"}`, "documents missing"},
		{`{"message":"busy","error":""}`, "busy"},
		{`{"detail":{"x":1},"title":"bad"}`, "bad"},
		{`{"other":"x"}`, `{"other":"x"}`},
		{`{not json`, `{not json`},
		{"connection refused", "connection refused"},
	} {
		if got := answerOf(c.in); got != c.want {
			t.Errorf("answerOf(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestHistoryListed: an entry lists its first ids, and the one asked
// for when it is a later one, escaped.
func TestHistoryListed(t *testing.T) {
	ids := make([]string, 12)
	for i := range ids {
		ids[i] = string(rune('a' + i))
	}
	if got := listed(ids, ""); got != "a b c d e f g h i j ... and 2 more" {
		t.Errorf("listed: %q", got)
	}
	if got := listed(ids, "l"); got != "a b c d e f g h i j l ... and 1 more" {
		t.Errorf("listed with a later id: %q", got)
	}
	if got := listed([]string{"x\x1b[2J"}, ""); strings.Contains(got, "\x1b") {
		t.Errorf("listed does not escape: %q", got)
	}
}

// TestTableRowAsFormat: list's table line, appended column by column,
// is what fmt wrote with tableFormat (the heading's): the same padding
// in runes for a name with accents or wide characters, no padding of a
// column that fills or passes its width, the last column unpadded.
func TestTableRowAsFormat(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, m := range []*dlq.Dead{
		{Key: "m-0"},
		{Key: "m-1", ClaimID: "C-1", DeadAt: at, FromQueue: "claim.in", Broker: "rejected", Count: 2, HasDeath: true,
			Known: true, Rec: claim.Record{Attempts: 3, LastStatus: 422, LastError: `{"error":"documents missing"}`}},
		{Key: "mé-ünï-日本語", ClaimID: "C-é", FromQueue: "clâim.in", Broker: "delivery_limit", HasDeath: true, Count: 1,
			Known: true, Rec: claim.Record{LastError: "dial tcp: refused \x1b[31m"}},
		{Key: strings.Repeat("k", 60), ClaimID: strings.Repeat("c", 14), FromQueue: strings.Repeat("q", 9), Broker: strings.Repeat("b", 30),
			Count: 12345, HasDeath: true, Known: true, Rec: claim.Record{Attempts: 123456, LastStatus: 503, LastError: strings.Repeat("e", 40)},
			Replaying: &dlq.Purged{At: at, By: "ann"}, Purged: &dlq.Purged{At: at}},
	} {
		cells := tableCells(m)
		args := make([]any, len(cells))
		for i, c := range cells {
			args[i] = c
		}
		want := fmt.Sprintf(tableFormat, args...)
		if got := string(appendTableRow([]byte("kept "), m)); got != "kept "+want {
			t.Errorf("%s:\nappended %q\nformat   %q", m.Key, got, "kept "+want)
		}
	}
}
