package sqlite

import (
	"context"
	"database/sql"
	"errors"
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

// Ping asks whether the store can keep a record now: a durable write of
// one page (the schema version, rewritten as it is), which a full file
// system refuses, as it would refuse a claim's record.
func (s *Store) Ping(ctx context.Context) error {
	return s.write(ctx, true, func(tx *sql.Tx) error {
		_, err := tx.Exec("PRAGMA user_version=" + strconv.Itoa(SchemaVersion))
		return err
	})
}
