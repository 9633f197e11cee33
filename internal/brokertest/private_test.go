package brokertest

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestHoldNode: a private node's lock, held by another descriptor (as
// another process would), is taken once that one lets go, and then kept:
// a third taker is refused while the test runs.
func TestHoldNode(t *testing.T) {
	node := fmt.Sprintf("eaimqlocktest%d", os.Getpid())
	path := filepath.Join(os.TempDir(), "eaimq-private-node-"+node+".lock")
	t.Cleanup(func() { os.Remove(path) })
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	other := open()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	go func() {
		holdNode(t, node)
		close(held)
	}()
	other.Close()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("holdNode still waiting 10 s after the other holder let go")
	}
	if err := syscall.Flock(int(open().Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		t.Fatal("a third taker got the lock holdNode holds")
	}
}
