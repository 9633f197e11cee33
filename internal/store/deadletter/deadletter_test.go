package deadletter

import (
	"reflect"
	"strconv"
	"testing"
)

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
		where, args := tc.q.Where(tc.ph)
		if where != tc.where || !reflect.DeepEqual(args, tc.args) {
			t.Errorf("%+v: %q %v, want %q %v", tc.q, where, args, tc.where, tc.args)
		}
	}
}
