package brokertest

import "testing"

// SkipShort skips t under go test -short, the contributors' fast loop that
// needs no server, saying what t needs instead. Every helper here that
// reaches the broker, starts a node or builds a program calls it first, so
// every test that uses one follows. Without -short nothing is skipped: a
// test that cannot reach its service fails and says how to start it.
func SkipShort(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("skipped under -short: needs %s", needs)
	}
}
