package linkpath

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFinal(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	os.WriteFile(real, nil, 0o600)
	os.Symlink("real", filepath.Join(dir, "rel"))
	os.Symlink(filepath.Join(dir, "rel"), filepath.Join(dir, "chain"))
	os.Symlink("sub/missing", filepath.Join(dir, "dangling"))
	os.Symlink("loop", filepath.Join(dir, "loop"))
	for in, want := range map[string]string{
		"real": real, "rel": real, "chain": real,
		"dangling": filepath.Join(dir, "sub", "missing"), "new": filepath.Join(dir, "new"),
	} {
		got, err := Final(filepath.Join(dir, in))
		if err != nil || got != want {
			t.Errorf("%s: %s %v, want %s", in, got, err, want)
		}
	}
	if _, err := Final(filepath.Join(dir, "loop")); err == nil {
		t.Error("a loop was followed forever")
	}
}
