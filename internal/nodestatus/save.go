package nodestatus

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"eaimq/internal/linkpath"
)

// writeStatus writes data to path in the way the kind of file there calls
// for (see the -o flag in the package comment). Only a regular file is
// replaced by rename: renaming over a device would turn /dev/full into a
// regular file (as root), and renaming over a symlink would replace the
// link instead of writing where it points.
func writeStatus(path string, data []byte) error {
	target, err := linkpath.Final(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fi, err := os.Stat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		dir := filepath.Dir(target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		return writeAtomic(target, data)
	case err != nil:
		return fmt.Errorf("write %s: %w", path, err)
	case fi.Mode().IsRegular():
		return writeAtomic(target, data)
	case fi.IsDir():
		return fmt.Errorf("write %s: it is a directory; -o wants a file path (or \"-\" for none)", path)
	default:
		return writeThrough(target, fi.Mode(), data)
	}
}

// writeAtomic replaces the regular file (or creates the new one) at path
// with data, so that a reader sees the old status or the new, never half.
// The status holds no secret, so the mode is 0644 whatever it was.
func writeAtomic(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".status-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, bare(err))
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, bare(err))
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, bare(err))
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, bare(err))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// The rename is durable once the directory is synced; a failure here
	// loses nothing the reader can see, so it is not an error.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// writeThrough writes data into an existing file that is not a regular
// file (a device, a FIFO), as the shell's > would, and reports the write's
// and the close's errors: /dev/full fails with ENOSPC.
func writeThrough(path string, mode fs.FileMode, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("write %s (%s): %w", path, kind(mode), bare(err))
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s (%s): %w", path, kind(mode), bare(err))
	}
	return nil
}

// bare drops the path an *fs.PathError repeats, since the message names
// the file already.
func bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}
