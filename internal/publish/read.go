package publish

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"sync/atomic"
	"syscall"

	"eaimq/internal/claimid"
	"eaimq/internal/fail"
)

// claim is one file to publish, as the first pass left it: enough to find
// it again and to notice that it changed, not its bytes, which are read
// again when it is sent. What cannot be read twice (standard input, a pipe,
// a FIFO, a device) keeps its bytes, each at most MaxBytes; so do the
// first files checked while all kept bytes fit in keepBudget, which spares
// a batch of small claims a second open and read per file.
type claim struct {
	name string // file name as given ("-" for stdin)
	size int
	sum  uint32 // CRC-32C of the bytes checked
	guid string
	body []byte // kept only when the file cannot be read again
	err  error  // why it cannot be published; nil when valid
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// keepBudget bounds the bytes of regular files the first pass keeps.
const keepBudget = 8 << 20

// readClaim reads and checks one claim into *buf (the caller's, reused for
// the next file), reading at most maxBytes+1 bytes so that a huge file is
// refused without being held. kept counts the bytes of regular files kept
// so far, against keepBudget; nil keeps none.
func readClaim(ctx context.Context, name string, stdin io.Reader, maxBytes int64, buf *[]byte, kept *atomic.Int64) claim {
	c := claim{name: name}
	var err error
	keep := true
	if name == "-" {
		*buf, err = readLimited(ctx, stdin, maxBytes+1, -1, (*buf)[:0])
	} else {
		*buf, keep, err = readPath(ctx, name, maxBytes+1, (*buf)[:0])
	}
	body := *buf
	switch {
	case err != nil:
		c.err = err
		return c
	case int64(len(body)) > maxBytes:
		c.err = fmt.Errorf("larger than the %d-byte limit (-max-bytes)", maxBytes)
		return c
	}
	c.guid, c.err = claimid.Guid(body)
	if c.err != nil {
		return c
	}
	c.size, c.sum = len(body), crc32.Checksum(body, castagnoli)
	if !keep && kept != nil {
		if kept.Add(int64(len(body))) <= keepBudget {
			keep = true
		} else {
			kept.Add(-int64(len(body)))
		}
	}
	if keep {
		c.body = append([]byte(nil), body...)
	}
	return c
}

// readPath reads at most limit bytes of the file name into buf. keep says
// whether its bytes must be kept, since only a regular file can be read a
// second time.
func readPath(ctx context.Context, name string, limit int64, buf []byte) (body []byte, keep bool, err error) {
	// A FIFO without a writer blocks here; the caller does not wait for it
	// past a signal.
	fd, err := ignoringEINTR(func() (int, error) { return syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0) })
	if err != nil {
		// A file that cannot be opened is most often a mistyped name:
		// its own class (exit 66), not a claim that is wrong (65).
		return buf, false, fail.New(fail.NoInput, openError(&os.PathError{Op: "open", Path: name, Err: err}))
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return buf, false, &os.PathError{Op: "fstat", Path: name, Err: err}
	}
	// The common case, a small regular file, in four system calls: open,
	// fstat, one read of its whole size, close. (os.Open would also try
	// to register it with the poller, and a read loop would make one more
	// read to meet the end of the file: over a batch of small claims that
	// was a large share of the first pass's time; BenchmarkFirstPass,
	// docs/figures.md.) Anything else, or a file whose size changed under
	// the read, goes on through os.File and readLimited.
	buf = buf[:0]
	size := st.Size
	if st.Mode&syscall.S_IFMT == syscall.S_IFREG && size < limit && size <= 1<<20 {
		if cap(buf) < int(size)+1 {
			buf = make([]byte, 0, size+1)
		}
		n, err := ignoringEINTR(func() (int, error) { return syscall.Read(fd, buf[:size+1]) })
		if err == nil && int64(n) == size {
			syscall.Close(fd)
			return buf[:n], false, nil
		}
		buf = buf[:max(n, 0)]
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return buf, false, fail.New(fail.NoInput, errors.New("is a directory"))
	case syscall.S_IFREG:
	default:
		size = -1
	}
	body, err = readLimited(ctx, f, limit, size, buf)
	if errors.Is(err, syscall.EISDIR) {
		err = fail.New(fail.NoInput, errors.New("is a directory"))
	}
	return body, size < 0, err
}

// ignoringEINTR calls f again while a signal interrupts it.
func ignoringEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != syscall.EINTR {
			return n, err
		}
	}
}

// readLimited appends to buf what r holds, up to limit bytes, in chunks,
// and stops between chunks when ctx ends: /dev/zero must not keep a
// process busy after Ctrl-C. size, when known (>= 0), sizes buf at once.
func readLimited(ctx context.Context, r io.Reader, limit, size int64, buf []byte) ([]byte, error) {
	const chunk = 1 << 20
	if size >= 0 {
		if want := int(min(size+1, limit)); cap(buf) < want {
			buf = slices.Grow(buf, want-len(buf)) // keeps what buf holds
		}
	}
	for int64(len(buf)) < limit {
		if err := ctx.Err(); err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(max(int64(cap(buf)), 64<<10), limit-int64(len(buf)))))
		}
		n := min(cap(buf)-len(buf), chunk, int(limit-int64(len(buf))))
		m, err := r.Read(buf[len(buf) : len(buf)+n])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

func openError(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errors.New("no such file")
	case errors.Is(err, os.ErrPermission):
		return errors.New("permission denied")
	}
	return err
}

// errChanged: the file is not what the first pass checked.
var errChanged = errors.New("changed since it was checked (size or contents differ); not sent")

// reread reads c's file again into buf for sending and checks that it is
// the same bytes the first pass checked.
func reread(ctx context.Context, c *claim, buf []byte) ([]byte, error) {
	if c.body != nil {
		return c.body, nil
	}
	body, _, err := readPath(ctx, c.name, int64(c.size)+1, buf[:0])
	switch {
	case err != nil:
		return body, fmt.Errorf("could not be read again: %w; not sent", err)
	case len(body) != c.size, crc32.Checksum(body, castagnoli) != c.sum:
		return body, errChanged
	}
	return body, nil
}

// readClaims runs the first pass: every file read and checked, a few at a
// time (a batch of small files is bound by open/read/close, which overlap
// well), keeping only what claim keeps. Each worker takes the next index
// itself and writes its claim in place: two channel handoffs per file
// with a coordinating goroutine made the pass over a large batch of small
// claims measurably slower, set against the bare open/fstat/read/close of
// the same files (BenchmarkFirstPass is the pass alone; docs/figures.md).
// It returns at once when ctx ends, with the names of the files still
// being read: a read from a FIFO without a writer or a terminal cannot be
// interrupted, so its goroutine is left to the process's exit.
func readClaims(ctx context.Context, files []string, stdin io.Reader, maxBytes int64) ([]claim, []string, error) {
	claims := make([]claim, len(files))
	// Each worker holds a buffer as large as the largest file it has read;
	// fewer workers when files may be large keep that bounded.
	workers := max(1, min(8, len(files), int((32<<20)/maxBytes)))
	var next atomic.Int64
	// reading[w] is the index of the file worker w is reading, -1 when none.
	reading := make([]atomic.Int64, workers)
	done := make(chan struct{})
	var left atomic.Int32
	left.Store(int32(workers))
	var kept atomic.Int64
	for w := range workers {
		reading[w].Store(-1)
		go func() {
			defer func() {
				if left.Add(-1) == 0 {
					close(done)
				}
			}()
			var buf []byte
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(files) {
					return
				}
				reading[w].Store(int64(i))
				claims[i] = readClaim(ctx, files[i], stdin, maxBytes, &buf, &kept)
				reading[w].Store(-1)
			}
		}()
	}
	select {
	case <-done:
	case <-ctx.Done():
		var busy []int
		for w := range reading {
			if i := reading[w].Load(); i >= 0 {
				busy = append(busy, int(i))
			}
		}
		slices.Sort(busy) // in the order given
		names := make([]string, len(busy))
		for k, i := range busy {
			names[k] = files[i]
		}
		return nil, names, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err // a file may have stopped short: no verdict
	}
	return claims, nil, nil
}
