package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// FilePath is the trail of the SQLite store at path: beside it, as the
// store's own -lock file is.
func FilePath(path string) string { return path + "-audit.jsonl" }

// file is the trail of an SQLite store: one JSON line an entry.
type file struct{ path string }

func (f *file) Where() string { return f.path }
func (f *file) Close() error  { return nil }

// open opens the file for appending, creating it 0600, and narrows a file
// made wider by hand back to 0600.
func (f *file) open() (*os.File, error) {
	h, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit trail %s: %w", f.path, err)
	}
	st, err := h.Stat()
	if err == nil && st.Mode().Perm()&0o077 != 0 {
		err = h.Chmod(0o600)
	}
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("audit trail %s: %w", f.path, err)
	}
	return h, nil
}

func (f *file) Check(context.Context) error {
	h, err := f.open()
	if err != nil {
		return err
	}
	return h.Close()
}

// Append writes the entry as one line in one write(2) of an O_APPEND file,
// so that two dlq processes writing at once never mix their lines, and
// syncs it before it returns.
func (f *file) Append(_ context.Context, e Entry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	h, err := f.open()
	if err != nil {
		return err
	}
	_, err = h.Write(append(line, '\n'))
	if err == nil {
		err = h.Sync()
	}
	if cerr := h.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("audit trail %s: %w", f.path, err)
	}
	return nil
}

// Entries reads the file line by line (a group's entry can be long: every
// id it acted on); a missing file is a trail with no entry yet.
func (f *file) Entries(ctx context.Context, id string, fn func(Entry) error) error {
	h, err := os.Open(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("audit trail %s: %w", f.path, err)
	}
	defer h.Close()
	r := bufio.NewReader(h)
	var quoted []byte
	if id != "" {
		quoted, _ = json.Marshal(id)
	}
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 && (quoted == nil || bytes.Contains(line, quoted)) {
			var e Entry
			if jerr := json.Unmarshal(line, &e); jerr != nil {
				return fmt.Errorf("audit trail %s, line %d: %w", f.path, n, jerr)
			}
			if id == "" || e.Names(id) {
				if ferr := fn(e); ferr != nil {
					return ferr
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("audit trail %s: %w", f.path, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
