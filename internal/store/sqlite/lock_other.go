//go:build !linux

package sqlite

import "os"

// Without open-file-description locks a store is never solo: every one
// writes its claims in progress as rows, as before solo mode.
func lockRange(*os.File, int64, bool, bool) (bool, error) { return false, errNoOFDLocks }

func lockedByOther(*os.File, int64) (bool, error) { return false, errNoOFDLocks }

func datasync(f *os.File) error { return f.Sync() }
