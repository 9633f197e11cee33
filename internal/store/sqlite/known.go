package sqlite

import (
	"context"
	"database/sql"
	"hash/maphash"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// known is a solo store's Bloom filter of the message ids that have a
// record in the file, so that Begin of an id never seen (nearly every
// claim) needs no read. A read is a read transaction on the WAL (its read
// lock taken and released with fcntl on the -shm file), a B-tree search
// and a cgo crossing: about a tenth of the CPU a claim costs, and the
// consumer's throughput at prefetch 5 is its CPU.
//
// The filter may say "maybe" of an id without a record (then Begin reads,
// as without it), never "no" of an id with one, because every row comes
// from one of two places and both are in it:
//
//   - rows written before the store went solo: scan reads every id once,
//     in the background, and the filter answers only once the scan is
//     done (ready);
//   - rows written since, by this store alone (solo: no other process
//     writes the file): soloFinish adds the id before it queues its write.
//
// Rows deleted by retention leave their ids in the filter: a "maybe" and
// a read, as before. When the store stops being solo the filter is no
// longer asked (shared mode reads every record in its transaction).
//
// What it buys, and what it costs: the ablation table in docs/figures.md
// (the consumer's CPU at prefetch 5 and 50 without it, and the store's);
// and the scan's cost is why a store with a history waits before it
// scans (see scan).
type known struct {
	seed  maphash.Seed
	bits  []atomic.Uint64
	mask  uint64 // len(bits)*64 - 1
	ready atomic.Bool

	due    atomic.Int64  // Finishes left before the scan reads past its first chunk
	goOn   chan struct{} // closed when it may (proceed)
	goOnce sync.Once
}

// knownBits is the filter's size for a file of size bytes: a power of two
// near a bit for every 16 bytes of file (a record and its share of the
// pages is about 100 bytes: some six to twelve bits an id, four set each,
// a false "maybe" for one id in 20 to one in 300), at least 2^23 bits
// (1 MiB: up to 200,000 ids about one in 10,000 is a false "maybe") and at
// most 2^27 (16 MiB). A filter of one size for every file made one of
// 10,000,000 records all "maybe": the scan's cost for nothing.
func knownBits(size int64) uint64 {
	bits := uint64(1) << 23
	for bits < uint64(size)/16 && bits < 1<<27 {
		bits <<= 1
	}
	return bits
}

func newKnown(size int64) *known {
	bits := knownBits(size)
	k := &known{seed: maphash.MakeSeed(), bits: make([]atomic.Uint64, bits/64), mask: bits - 1, goOn: make(chan struct{})}
	k.due.Store(size / scanCredit)
	if size/scanCredit == 0 {
		k.proceed()
	}
	return k
}

// finished counts one Finish towards the scan's go-ahead.
func (k *known) finished() {
	if k != nil && k.due.Add(-1) == 0 {
		k.proceed()
	}
}

// proceed lets the scan read past its first chunk.
func (k *known) proceed() { k.goOnce.Do(func() { close(k.goOn) }) }

// positions calls f with the four bit positions of the id whose hash is h
// (double hashing).
func (k *known) positions(h uint64, f func(bit uint64) bool) {
	h1, h2 := h, h>>32|1
	for i := range uint64(4) {
		if !f((h1 + i*h2) & k.mask) {
			return
		}
	}
}

func (k *known) addHash(h uint64) {
	k.positions(h, func(b uint64) bool {
		k.bits[b/64].Or(1 << (b % 64))
		return true
	})
}

// add puts id in the filter (none: nothing to do).
func (k *known) add(id string) {
	if k != nil {
		k.addHash(maphash.String(k.seed, id))
	}
}

// absent reports that id surely has no record: the filter is ready and
// one of its bits is clear.
func (k *known) absent(id string) bool {
	if k == nil || !k.ready.Load() {
		return false
	}
	in := true
	k.positions(maphash.String(k.seed, id), func(b uint64) bool {
		in = k.bits[b/64].Load()&(1<<(b%64)) != 0
		return in
	})
	return !in
}

// startKnown gives a store that went solo its filter, and starts the
// scan (stopped and waited for by Close).
func (s *Store) startKnown() {
	var ctx context.Context
	ctx, s.endScan = context.WithCancel(context.Background())
	var size int64
	if fi, err := os.Stat(s.file); err == nil {
		size = fi.Size()
	}
	s.known, s.scanned = newKnown(size), make(chan struct{})
	go func() {
		defer close(s.scanned)
		s.known.scan(ctx, s.reads.db)
	}()
}

// scan adds every id in the file, then makes the filter ready. An error
// (or ctx ending) leaves it not ready: every Begin reads, as without it.
//
// It reads scanChunk ids at a time in key order, and after each chunk
// waits scanPace times as long as the chunk took, so that it takes at most
// a twentieth of a core from the claims the consumer is working on: a
// file of 1,000,000 records is about a second of reading, which at full
// speed cost a short drain a third of its rate (the ids are read through
// cgo one row at a time). A small file is ready at once.
//
// A file with more than one chunk waits after the first, until the store
// has finished a claim for every scanCredit bytes of the file (proceed):
// each of those claims paid a read the filter would have spared, and only
// a consumer that has paid about what the scan will cost it goes on to
// pay for the scan (the renter's rule: never more than twice the better
// choice known in hindsight). Scanning at once made every short run on a
// store with a history slower than on an empty one: a drain of 3,000
// claims on a file of 1,000,000 records used 1.22 times the CPU of the
// same drain on an empty file, and 0.98 times without the filter (the
// figures, and how they were measured, are in docs/figures.md).
func (k *known) scan(ctx context.Context, db *sql.DB) {
	var last []byte
	for first := true; ; first = false {
		began := time.Now()
		q, args := `SELECT message_id FROM claims ORDER BY message_id LIMIT ?`, []any{scanChunk}
		if !first {
			q, args = `SELECT message_id FROM claims WHERE message_id > ? ORDER BY message_id LIMIT ?`, []any{string(last), scanChunk}
		}
		n, err := k.readChunk(ctx, db, q, args, &last)
		if err != nil {
			return
		}
		if n < scanChunk {
			k.ready.Store(true)
			return
		}
		if first {
			select {
			case <-ctx.Done():
				return
			case <-k.goOn:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(scanPace * time.Since(began)):
		}
	}
}

// scanChunk and scanPace bound scan's share of the CPU, and scanCredit
// when it reads past its first chunk (see scan): a read spared costs
// about as much CPU as the scan of 4 KiB of file (some 40 records).
const (
	scanChunk  = 4096
	scanPace   = 19
	scanCredit = 4096
)

// readChunk adds the ids of one chunk's query, keeps the last one in
// *last, and returns how many it read.
func (k *known) readChunk(ctx context.Context, db *sql.DB, q string, args []any, last *[]byte) (n int, err error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var id sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return n, err
		}
		k.addHash(maphash.Bytes(k.seed, id))
		*last = append((*last)[:0], id...) // id is the driver's until Next
		n++
	}
	return n, rows.Err()
}
