package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"strconv"
	"syscall"

	"github.com/mattn/go-sqlite3"
)

// Transient reports whether err is one the store gets over by itself once
// its cause is gone, so that the consumer waits for it rather than exits:
// the file system full (SQLITE_FULL, or ENOSPC and EDQUOT from a write or
// the WAL's fsync), or the file locked by another process for longer than
// the busy timeout. A damaged file, a permission, a schema from the future
// is not: waiting would not change it.
func Transient(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrFull, sqlite3.ErrBusy, sqlite3.ErrLocked:
			return true
		case sqlite3.ErrIoErr:
			return se.SystemErrno == syscall.ENOSPC || se.SystemErrno == syscall.EDQUOT
		}
		return false
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// Misconfigured reports whether err, from Open, is one that only a person
// can fix, so that a service is not restarted for it: no store where one
// must be (ErrNoStore), a path that is not a file, a permission (the file,
// its -shm or its directory owned by another user, a read-only file
// system), a schema from a newer release. A damaged file, a full disk or
// any other failure of the file is not: those are the store's (exit 74).
func Misconfigured(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrPerm, sqlite3.ErrReadonly, sqlite3.ErrAuth:
			return true
		case sqlite3.ErrCantOpen:
			return se.SystemErrno == syscall.EACCES || se.SystemErrno == syscall.EPERM || se.SystemErrno == syscall.EROFS
		}
		return false
	}
	var newer NewerSchemaError
	return errors.Is(err, ErrNoStore) || errors.Is(err, errNotRegular) || errors.As(err, &newer) ||
		errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.ENOTDIR)
}

// Ping asks whether the store can keep a record now: a durable write of
// one page (the schema version, rewritten as it is), which a full file
// system refuses, as it would refuse a claim's record.
func (s *Store) Ping(ctx context.Context) error {
	return s.write(ctx, true, func(tx *sql.Tx) error {
		_, err := tx.Exec("PRAGMA user_version=" + strconv.Itoa(SchemaVersion))
		return err
	})
}
