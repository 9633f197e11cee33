package brokertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"eaimq/internal/rabbitctl"
)

// PrivateNode starts a broker node of the caller's own (its own node name,
// AMQP port, distribution port = AMQP port + 20000, and data directory) with
// scripts/mq-up.sh, and stops it when the test or benchmark ends, so that
// what it does to a broker (restart it, raise its memory alarm, make it hold
// 100,000 unacked messages) never disturbs the machine's shared one. up
// starts it (again); stop stops it. Each caller picks a node name and a
// port in 5690-5699 that no other test uses.
//
// One process at a time has a node name: a second caller (another
// package's test binary, a helper's benchmark beside scripts/bench.sh)
// waits for the first to finish with it. Without that, the second's
// mq-up.sh found the node up, and the first caller's cleanup stopped it
// under the second mid-run (a benchmark's node "died" in the middle of a
// fill: BenchmarkDLQIngest, twice).
//
// Make vhosts on it with NewOn(t, rabbitctl.Ctl{Node: node},
// fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port)) after this call:
// t.Cleanup runs last-registered first, so they are deleted before the node
// stops.
func PrivateNode(t testing.TB, node string, port int) (up, stop func()) {
	t.Helper()
	SkipShort(t, "a RabbitMQ node of its own")
	holdNode(t, node)
	_, file, _, _ := runtime.Caller(0)
	mqUp := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "mq-up.sh")
	up = func() {
		t.Helper()
		cmd := exec.Command("bash", mqUp)
		cmd.Env = append(os.Environ(), "EAIMQ_NODE="+node, fmt.Sprintf("EAIMQ_AMQP_PORT=%d", port),
			"EAIMQ_STATUS_FILE="+filepath.Join(t.TempDir(), "status.txt"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("start private node %s: %v\n%s", node, err, out)
		}
	}
	stop = func() {
		if _, err := (rabbitctl.Ctl{Node: node}).Run(context.Background(), "stop"); err != nil {
			t.Logf("stop private node %s: %v", node, err)
		}
	}
	// Registered before any vhost on the node, so it runs after their
	// deletion; and before the start, so that a node that came up but
	// failed mq-up.sh's last step is stopped all the same.
	t.Cleanup(stop)
	up()
	return up, stop
}

// holdNode takes the node's lock (a file in the temporary directory,
// locked with flock: the kernel releases it when the process ends,
// however it ends) and keeps it until the test's cleanups have run: it is
// registered before the node's stop, so it is released after it.
func holdNode(t testing.TB, node string) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "eaimq-private-node-"+node+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("lock private node %s: %v", node, err)
	}
	t.Cleanup(func() { f.Close() })
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
		return
	}
	t.Logf("private node %s is another process's (%s is locked): waiting for it to finish", node, path)
	start := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("lock private node %s: %v", node, err)
	}
	t.Logf("private node %s is ours after %s", node, time.Since(start).Round(time.Second))
}
