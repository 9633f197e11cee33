// Package linkpath follows a path's symbolic links to the path a write
// finally lands on. The dedup store (SQLite keeps its -wal beside the real
// file, which is the one to fsync) and brokerstatus -o (which writes through
// a link rather than replacing it) both need it.
package linkpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Final follows path's symbolic links, a dangling one included, and returns
// the path at the end of the chain. Unlike filepath.EvalSymlinks it does not
// need that end to exist: `echo x > dangling` creates the link's target, and
// so do the programs. A missing path, or anything but a link, is returned
// as it is; Stat says what it is.
func Final(path string) (string, error) {
	for range 40 { // Linux's own limit on links followed in one lookup
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return path, nil
		}
		link, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(path), link)
		}
		path = link
	}
	return "", errors.New("too many levels of symbolic links")
}
