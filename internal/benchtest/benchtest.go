// Package benchtest is what the benchmarks behind docs/figures.md share:
// the spread of a benchmark's alternated rounds, and a SQLite store that
// holds earlier records, filled in bulk.
package benchtest

import (
	"database/sql"
	"slices"
	"testing"
	"time"

	"eaimq/internal/store/sqlite"
)

// Spread reports the median, least and greatest of ratios, the rounds of
// one alternated run (nothing when there are none): on a shared, noisy
// machine one ratio is a sample, the spread says how far to trust it.
func Spread(b *testing.B, ratios []float64, name string) {
	if len(ratios) == 0 {
		return
	}
	s := slices.Sorted(slices.Values(ratios))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	b.ReportMetric(med, "median-"+name)
	b.ReportMetric(s[0], "min-"+name)
	b.ReportMetric(s[len(s)-1], "max-"+name)
}

// EarlierRecords fills a new SQLite store at path with n delivered
// records, as a long-running consumer leaves them: random 32-hex-digit
// message_ids (a new claim's record lands anywhere in the table, not at
// its end, and the pages are as full as in a store grown claim by claim),
// a claimId, one call, status 201, the reason word. They are written in
// bulk, in one statement (not timed; 1,000,000 claims through the broker
// would take minutes); the schema is the store's own, made by its Open.
func EarlierRecords(b *testing.B, path string, n int) {
	s, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	// A cache as large as the table, on this connection only: the rows
	// land at random, and with SQLite's default 2 MiB each insert would
	// read its page from the file (10,000,000 took minutes).
	if _, err := db.Exec(`PRAGMA cache_size=-4000000`); err != nil {
		b.Fatal(err)
	}
	now := time.Now().UnixMilli()
	if _, err := db.Exec(`WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < ?)
		INSERT INTO claims (message_id, state, claim_id, attempts, failures, last_status, reason, updated_at, done_at)
		SELECT lower(hex(randomblob(16))), 'done', 'C-' || n, 1, 0, 201, 'delivered', ? - n, ? - n FROM i`, n, now, now); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		b.Fatal(err)
	}
}
