package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"eaimq/internal/brokertest"
	"eaimq/internal/store"
)

// TestRetain: with --retain the consumer prunes, while it runs, the records
// of claims delivered longer ago than the age, and keeps the dead-lettered
// one; a bad age is a usage error before anything is opened.
func TestRetain(t *testing.T) {
	var out, errb bytes.Buffer
	err := run(context.Background(), context.Background(), []string{"--claim", "http://x", "--retain", "90x"}, func(string) string { return "" }, &out, &errb)
	if got := err.Error(); !strings.Contains(got, "--retain") || !strings.Contains(got, "90d") {
		t.Fatalf("--retain 90x: %v, want a usage error naming the fix", err)
	}

	h := newHarness(t)
	claims := brokertest.Claims("kept", "C-kept", 3, true)
	claims = append(claims, brokertest.Claims("nodocs", "C-nodocs", 1, false)...) // 422: dead-lettered
	h.vh.PublishClaims(t, claims...)
	st := func() store.Store {
		s, err := store.Open(h.db, store.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	found := func(id string) bool {
		if h.totalCalls() == 0 {
			// The consumer opens and migrates its store before its first
			// call; the file alone may exist a moment before the schema.
			return false
		}
		s := st()
		defer s.Close()
		_, ok, err := s.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// Seen recorded first, then gone: pruned, not never written.
	var delivered bool
	h.runUntil("the delivered records pruned", func() bool {
		delivered = delivered || found("kept-000")
		return delivered && h.drained() && !found("kept-000") && !found("kept-001") && !found("kept-002")
	}, "--retain", "1s", "--log-level", "warn")
	if !found("nodocs-000") {
		t.Error("the dead-lettered claim's record was pruned")
	}
	if n := h.totalCalls(); n != 4 {
		t.Errorf("%d partner calls, want 4", n)
	}
}
