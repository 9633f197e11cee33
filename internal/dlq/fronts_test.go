package dlq

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// walkSelected walks b as list does (Browser.Walk, the fronts' one way in)
// and returns the dead letters c selects and what the walk looked at. The
// engine's tests read the model through it; how list prints that model is
// internal/dlqcli's and the program's golden files' business.
func walkSelected(t *testing.T, b *Browser, c Config) ([]*Dead, Walked) {
	t.Helper()
	var ms []*Dead
	if err := b.Walk(context.Background(), c, func(m *Dead) error { ms = append(ms, m); return nil }); err != nil {
		t.Fatalf("walk: %v", err)
	}
	return ms, b.Walked()
}

// keysOf is the dead letters' keys, in the walk's order.
func keysOf(ms []*Dead) []string {
	ks := make([]string, len(ms))
	for i, m := range ms {
		ks[i] = m.Key
	}
	return ks
}

// TestCheckEdit: an edit is checked as publish checks a claim, and
// must keep the claim's id; the check names why.
func TestCheckEdit(t *testing.T) {
	for _, c := range []struct {
		id, body, want string
	}{
		{"g-1", `{"guid":"g-1","docs":["a"]}`, ""},
		{"g-1", `  {"guid":"g-1"}` + "\r\n", ""},
		{"g-1", ``, "empty"},
		{"g-1", `{"guid":"g-1",}`, "not a claim publish would send"},
		{"g-1", `["g-1"]`, "not a claim publish would send"},
		{"g-1", `{"guid":"g-1","guid":"g-1"}`, "not a claim publish would send"},
		{"g-1", `{"guid":"g-1\t"}`, "not a claim publish would send"},
		{"g-1", `{"guid":"g-2"}`, `must stay "g-1"`},
		{"g-1", `{"GUID":"g-1"}`, "not a claim publish would send"},
		{"sha256:0011", `{"guid":"new-id"}`, ""},
		{"g-1", `{"guid":"g-1","pad":"` + strings.Repeat("x", MaxBody) + `"}`, "limit"},
	} {
		_, err := CheckEdit(c.id, []byte(c.body))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%.40q: %v", c.body, err)
		case c.want != "" && (err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%.40q: %v, want %q", c.body, err, c.want)
		}
	}
}

// TestQuorumWarning: a walk that saw a dead letter delivered half of
// RabbitMQ 4's default delivery limit times warns, naming the fix; on 3.x
// (no default limit) and below the count, nothing.
func TestQuorumWarning(t *testing.T) {
	for _, c := range []struct {
		version    string
		deliveries int64
		warns      bool
	}{{"4.0.5", 12, true}, {"4.1.0", 10, true}, {"4.0.5", 9, false}, {"3.10.8", 19, false}, {"", 30, false}, {"10.2", 11, true}} {
		var s strings.Builder
		QuorumWarning(&Browser{version: c.version, deliveries: c.deliveries}, &s)
		if got := s.Len() > 0; got != c.warns || (got && !strings.Contains(s.String(), `"delivery-limit": -1`)) {
			t.Errorf("%+v: %q", c, s.String())
		}
	}
}
