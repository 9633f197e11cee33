package nodestatus

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWriteStatus: what -o does for each kind of path. A regular file or a
// new path is replaced atomically; a link is written through to its target
// and stays a link; a device is written into and stays a device, its
// write error reported; a directory is refused.
func TestWriteStatus(t *testing.T) {
	const data = "Status of node rabbit@localhost ...\n"
	isChar := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.Mode()&fs.ModeCharDevice != 0
	}
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, dir string) string // returns the -o path
		wantErr string                                // "" = no error
		check   func(t *testing.T, path string)
	}{
		{
			name: "regular file",
			setup: func(t *testing.T, dir string) string {
				p := filepath.Join(dir, "status.txt")
				mustWrite(t, p, "old, longer than the new status, to show it is replaced\n", 0o600)
				return p
			},
			check: func(t *testing.T, p string) {
				wantFile(t, p, data, 0o644)
			},
		},
		{
			name:  "new path in a new directory",
			setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "a", "b", "status.txt") },
			check: func(t *testing.T, p string) { wantFile(t, p, data, 0o644) },
		},
		{
			name: "symlink to a regular file",
			setup: func(t *testing.T, dir string) string {
				target := filepath.Join(dir, "real", "status.txt")
				os.Mkdir(filepath.Dir(target), 0o755)
				mustWrite(t, target, "old\n", 0o644)
				link := filepath.Join(dir, "status.txt")
				mustSymlink(t, "real/status.txt", link)
				return link
			},
			check: func(t *testing.T, p string) {
				wantLink(t, p)
				wantFile(t, filepath.Join(filepath.Dir(p), "real", "status.txt"), data, 0o644)
			},
		},
		{
			name: "dangling symlink",
			setup: func(t *testing.T, dir string) string {
				link := filepath.Join(dir, "status.txt")
				mustSymlink(t, filepath.Join(dir, "not-yet.txt"), link)
				return link
			},
			check: func(t *testing.T, p string) {
				wantLink(t, p)
				wantFile(t, filepath.Join(filepath.Dir(p), "not-yet.txt"), data, 0o644)
			},
		},
		{
			name:    "directory",
			setup:   func(t *testing.T, dir string) string { return dir },
			wantErr: "is a directory",
			check: func(t *testing.T, p string) {
				if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
					t.Errorf("%s is no longer a directory", p)
				}
			},
		},
		{
			name:  "/dev/null",
			setup: func(t *testing.T, dir string) string { return "/dev/null" },
			check: func(t *testing.T, p string) {
				if !isChar(p) {
					t.Errorf("%s is no longer a character device", p)
				}
			},
		},
		{
			name:    "/dev/full",
			setup:   func(t *testing.T, dir string) string { return "/dev/full" },
			wantErr: syscall.ENOSPC.Error(),
			check: func(t *testing.T, p string) {
				if !isChar(p) {
					t.Errorf("%s is no longer a character device", p)
				}
			},
		},
		{
			name: "symlink to /dev/full",
			setup: func(t *testing.T, dir string) string {
				link := filepath.Join(dir, "status.txt")
				mustSymlink(t, "/dev/full", link)
				return link
			},
			wantErr: syscall.ENOSPC.Error(),
			check: func(t *testing.T, p string) {
				wantLink(t, p)
				if !isChar("/dev/full") {
					t.Errorf("/dev/full is no longer a character device")
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.name, "/dev/") {
				if _, err := os.Stat(tc.name); err != nil {
					t.Skipf("no %s here: %v", tc.name, err)
				}
			}
			dir := t.TempDir()
			p := tc.setup(t, dir)
			err := writeStatus(p, []byte(data))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("writeStatus(%s): %v", p, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("writeStatus(%s) = %v, want an error with %q", p, err, tc.wantErr)
			}
			tc.check(t, p)
			filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err == nil && strings.HasPrefix(d.Name(), ".status-") {
					t.Errorf("temporary file left behind: %s", path)
				}
				return nil
			})
		})
	}
}

func mustWrite(t *testing.T, p, s string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func wantFile(t *testing.T, p, data string, mode fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != mode {
		t.Errorf("%s: mode %v, want a regular file %v", p, fi.Mode(), mode)
	}
	if b, _ := os.ReadFile(p); string(b) != data {
		t.Errorf("%s holds %q, want %q", p, b, data)
	}
}

func wantLink(t *testing.T, p string) {
	t.Helper()
	if fi, err := os.Lstat(p); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("%s is no longer a symbolic link (%v, %v)", p, fi.Mode(), err)
	}
}
