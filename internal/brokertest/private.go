package brokertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

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
// Make vhosts on it with NewOn(t, rabbitctl.Ctl{Node: node},
// fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port)) after this call:
// t.Cleanup runs last-registered first, so they are deleted before the node
// stops.
func PrivateNode(t testing.TB, node string, port int) (up, stop func()) {
	t.Helper()
	SkipShort(t, "a RabbitMQ node of its own")
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
