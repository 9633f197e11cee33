package main

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

// privateNode starts a broker node of the benchmark's own (its own node
// name, AMQP and distribution ports, data directory) with scripts/mq-up.sh,
// with the lab's absolute 512MiB watermark, and stops it when the benchmark
// ends. A benchmark that pushes gigabytes through a broker must not put the
// machine's shared broker under an alarm that other runs would meet.
func privateNode(t testing.TB, node string, port int) rabbitctl.Ctl {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	mqUp := filepath.Join(filepath.Dir(file), "..", "scripts", "mq-up.sh")
	cmd := exec.Command("bash", mqUp)
	cmd.Env = append(os.Environ(), "EAIMQ_NODE="+node, fmt.Sprintf("EAIMQ_AMQP_PORT=%d", port),
		"EAIMQ_STATUS_FILE="+filepath.Join(t.TempDir(), "status.txt"))
	ctl := rabbitctl.Ctl{Node: node}
	// Registered before any vhost on the node, so it runs after their
	// deletion; registered before the start too, so that a node that came
	// up but failed its status step is stopped all the same.
	t.Cleanup(func() {
		if _, err := ctl.Run(context.Background(), "stop"); err != nil {
			t.Logf("stop private node %s: %v", node, err)
		}
	})
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start private node %s: %v\n%s", node, err, out)
	}
	return ctl
}
