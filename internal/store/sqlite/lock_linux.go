package sqlite

import (
	"errors"
	"os"
	"syscall"
)

// Open-file-description locks (F_OFD_*, Linux 3.15): owned by the open
// file, not the process, so two stores in one process are two holders, as
// two processes are, and a lock changes type atomically.
const (
	fOFDGetlk  = 36
	fOFDSetlk  = 37
	fOFDSetlkw = 38
)

// lockRange locks byte off of f, shared or exclusive, waiting for it or
// not; ok is false when another holder has it (and wait is false).
func lockRange(f *os.File, off int64, exclusive, wait bool) (ok bool, err error) {
	lk := syscall.Flock_t{Type: syscall.F_RDLCK, Start: off, Len: 1}
	if exclusive {
		lk.Type = syscall.F_WRLCK
	}
	cmd := fOFDSetlk
	if wait {
		cmd = fOFDSetlkw
	}
	for {
		err = syscall.FcntlFlock(f.Fd(), cmd, &lk)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EACCES):
			return false, nil
		case errors.Is(err, syscall.EINVAL):
			return false, errNoOFDLocks // a kernel before 3.15
		}
		return false, err
	}
}

// lockedByOther reports whether another holder has any lock on byte off.
func lockedByOther(f *os.File, off int64) (bool, error) {
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Start: off, Len: 1}
	if err := syscall.FcntlFlock(f.Fd(), fOFDGetlk, &lk); err != nil {
		return false, err
	}
	return lk.Type != syscall.F_UNLCK, nil
}

// datasync is fdatasync, as SQLite itself syncs on Linux: the data and the
// file's size, without a journal commit for its times alone.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
