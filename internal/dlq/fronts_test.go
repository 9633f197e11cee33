package dlq

import (
	"context"
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
