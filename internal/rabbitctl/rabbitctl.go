// Package rabbitctl runs rabbitmqctl the way an operator would: against the
// node that answers on this machine, found rather than assumed, since the
// lab's node is rabbit@localhost but a machine's system node may be named
// otherwise.
package rabbitctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LabNode is the node name the lab's mq-up.sh starts.
const LabNode = "rabbit@localhost"

// ErrNoNode means no RabbitMQ node answered rabbitmqctl.
var ErrNoNode = errors.New("no RabbitMQ node answers rabbitmqctl (start one with scripts/mq-up.sh)")

// Ctl runs rabbitmqctl against one node.
type Ctl struct {
	Node string // passed as -n; empty means rabbitmqctl's own default
	Bin  string // the rabbitmqctl binary; empty means "rabbitmqctl" on PATH
}

// WaitDelay bounds how long Run waits, once its context has ended and the
// process group has been killed, for rabbitmqctl's output pipes to close.
// A process that escaped the group (see killTree) may hold them open until
// it exits on its own, which for an unreachable node is about 50 s.
const WaitDelay = 500 * time.Millisecond

// Run runs rabbitmqctl with args and returns its standard output.
//
// When ctx ends, Run returns within WaitDelay: rabbitmqctl is a shell
// wrapper whose Erlang VM is a grandchild (as root, behind su, in a
// session of its own), so killing the direct child alone would leave the
// VM holding the pipes open and Run waiting for it. Run therefore starts
// rabbitmqctl in its own process group, kills the group and every
// descendant when ctx ends, and stops waiting for the pipes after
// WaitDelay.
func (c Ctl) Run(ctx context.Context, args ...string) ([]byte, error) {
	bin := c.Bin
	if bin == "" {
		bin = "rabbitmqctl"
	}
	full := args
	if c.Node != "" {
		full = append([]string{"-n", c.Node}, args...)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killTree(cmd.Process.Pid) }
	cmd.WaitDelay = WaitDelay
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%s not found: install rabbitmq-server (scripts/mq-up.sh does): %w", bin, err)
		}
		if ctx.Err() != nil {
			return stdout.Bytes(), fmt.Errorf("rabbitmqctl %s: %w", strings.Join(full, " "), context.Cause(ctx))
		}
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.Bytes(), fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(full, " "), err, firstLines(msg, 3))
	}
	return stdout.Bytes(), nil
}

// Detect finds the node to talk to: LabNode when it answers, else the node
// rabbitmqctl reaches by default. It returns ErrNoNode when neither answers.
func Detect(ctx context.Context) (Ctl, error) {
	lab := Ctl{Node: LabNode}
	if _, err := lab.Run(ctx, "-q", "eval", "node()."); err == nil {
		return lab, nil
	} else if _, lookErr := exec.LookPath("rabbitmqctl"); lookErr != nil {
		return Ctl{}, err
	}
	out, err := Ctl{}.Run(ctx, "-q", "eval", "node().")
	if err != nil {
		return Ctl{}, fmt.Errorf("%w: %v", ErrNoNode, err)
	}
	name := strings.Trim(strings.TrimSpace(string(out)), "'")
	if name == "" {
		return Ctl{}, ErrNoNode
	}
	return Ctl{Node: name}, nil
}

// QueueRow is one line of list_queues name messages messages_unacknowledged.
type QueueRow struct {
	Name     string
	Messages int
	Unacked  int
}

// ListQueues returns the queues of vhost with their depth and unacked count.
func (c Ctl) ListQueues(ctx context.Context, vhost string) ([]QueueRow, error) {
	out, err := c.Run(ctx, "-q", "list_queues", "-p", vhost, "--no-table-headers",
		"name", "messages", "messages_unacknowledged")
	if err != nil {
		return nil, err
	}
	var rows []QueueRow
	for _, f := range table(out) {
		if len(f) != 3 {
			continue
		}
		m, err1 := strconv.Atoi(f[1])
		u, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			continue
		}
		rows = append(rows, QueueRow{Name: f[0], Messages: m, Unacked: u})
	}
	return rows, nil
}

// Binding is one line of list_bindings.
type Binding struct {
	Source, Destination, DestinationKind, RoutingKey string
}

// ListBindings returns the bindings of vhost, the default exchange's
// implicit ones included.
func (c Ctl) ListBindings(ctx context.Context, vhost string) ([]Binding, error) {
	out, err := c.Run(ctx, "-q", "list_bindings", "-p", vhost, "--no-table-headers",
		"source_name", "destination_name", "destination_kind", "routing_key")
	if err != nil {
		return nil, err
	}
	var bs []Binding
	for _, f := range table(out) {
		if len(f) == 4 {
			bs = append(bs, Binding{Source: f[0], Destination: f[1], DestinationKind: f[2], RoutingKey: f[3]})
		}
	}
	return bs, nil
}

// table splits rabbitmqctl's tab-separated quiet output into fields.
func table(out []byte) [][]string {
	var rows [][]string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		rows = append(rows, strings.Split(line, "\t"))
	}
	return rows
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}
