package publish

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// firstPassClaims is the batch of BenchmarkFirstPass, publish's
// BenchmarkPublishBulk's.
const firstPassClaims = 20000

// BenchmarkFirstPass is the check of 20,000 claim files alone (read,
// validate, checksum), the part of a bulk publish that nothing may
// overlap: nothing is sent before every file has been checked.
//
//	go test -run '^$' -bench FirstPass ./internal/publish
func BenchmarkFirstPass(b *testing.B) {
	dir := b.TempDir()
	files := make([]string, firstPassClaims)
	for i := range files {
		// The claims of publish's benchmarks: about 400 bytes each.
		files[i] = writeClaim(b, dir, fmt.Sprintf("c%05d.json", i), fmt.Sprintf(`{"guid":"bulk-%05d","claimId":"C-%05d","docs":["receipt.pdf"],"amount":%d,"note":"%s"}`,
			i, i, 1000+i, strings.Repeat("x", 300)))
	}
	syscall.Sync() // written out now, not during a timed pass
	for b.Loop() {
		claims, _, err := readClaims(context.Background(), files, nil, 1<<20)
		if err != nil || claims[len(claims)-1].err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*firstPassClaims), "µs/file")
}
