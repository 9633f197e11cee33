// Package rabbitctl runs rabbitmqctl the way an operator would: against the
// node that answers on this machine, found rather than assumed, since the
// lab's node is rabbit@localhost but a machine's system node may be named
// otherwise.
package rabbitctl

import (
	"bytes"
	"context"
	"encoding/json"
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
	// Cmd, when set, is the whole command that stands for rabbitmqctl -n
	// NODE, its arguments following (Node and Bin are not used): another
	// broker's own, such as "rabbitmq4.sh ctl" for a RabbitMQ 4 node in a
	// chroot.
	Cmd []string
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
	switch {
	case len(c.Cmd) > 0:
		bin, full = c.Cmd[0], append(c.Cmd[1:len(c.Cmd):len(c.Cmd)], args...)
	case c.Node != "":
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

// EnvCtl names the command that is the broker's rabbitmqctl, its node
// named (split at spaces): "rabbitmqctl -n rabbit@mq1", or another
// broker's own, such as "rabbitmq4.sh ctl". Unset, the node is found with
// Detect.
const EnvCtl = "EAIMQ_RABBITMQCTL"

// FromEnv is the Ctl that EnvCtl names; ok is false when it names none.
func FromEnv(getenv func(string) string) (c Ctl, ok bool) {
	cmd := strings.Fields(getenv(EnvCtl))
	if len(cmd) == 0 {
		return Ctl{}, false
	}
	return Ctl{Cmd: cmd}, true
}

// AMQPPorts lists the ports the node's AMQP listeners are on: the way to
// know that the node rabbitmqctl reaches is the broker a URL names.
func (c Ctl) AMQPPorts(ctx context.Context) ([]int, error) {
	out, err := c.Run(ctx, "-q", "eval", "[P || {listener,_,amqp,_,_,P,_} <- rabbit_networking:active_listeners()].")
	if err != nil {
		return nil, err
	}
	var ports []int
	for _, f := range strings.FieldsFunc(string(out), func(r rune) bool { return r < '0' || r > '9' }) {
		if n, err := strconv.Atoi(f); err == nil {
			ports = append(ports, n)
		}
	}
	return ports, nil
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

// ListQueues returns the queues of vhost with their depth and unacked
// count. It reads rabbitmqctl's JSON (--formatter json), not the
// tab-separated table, where a queue name holding a tab or newline could
// not be told apart from the columns; a row it cannot read (a count that
// is not a number, as for a queue whose process is down) is an error,
// never a row left out.
func (c Ctl) ListQueues(ctx context.Context, vhost string) ([]QueueRow, error) {
	out, err := c.Run(ctx, "-q", "list_queues", "-p", vhost, "--formatter", "json",
		"name", "messages", "messages_unacknowledged")
	if err != nil {
		return nil, err
	}
	var raw []struct {
		Name     string          `json:"name"`
		Messages json.RawMessage `json:"messages"`
		Unacked  json.RawMessage `json:"messages_unacknowledged"`
	}
	if err := decodeJSON(out, &raw); err != nil {
		return nil, fmt.Errorf("list_queues -p %s: %w", vhost, err)
	}
	rows := make([]QueueRow, 0, len(raw))
	for _, r := range raw {
		m, err1 := strconv.Atoi(string(r.Messages))
		u, err2 := strconv.Atoi(string(r.Unacked))
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("list_queues -p %s: queue %q: messages %s, unacked %s: not numbers (is the queue down?)",
				vhost, r.Name, orNone(r.Messages), orNone(r.Unacked))
		}
		rows = append(rows, QueueRow{Name: r.Name, Messages: m, Unacked: u})
	}
	return rows, nil
}

// Binding is one line of list_bindings.
type Binding struct {
	Source          string `json:"source_name"`
	Destination     string `json:"destination_name"`
	DestinationKind string `json:"destination_kind"`
	RoutingKey      string `json:"routing_key"`
}

// ListBindings returns the bindings of vhost, the default exchange's
// implicit ones included, read from rabbitmqctl's JSON as ListQueues is.
func (c Ctl) ListBindings(ctx context.Context, vhost string) ([]Binding, error) {
	out, err := c.Run(ctx, "-q", "list_bindings", "-p", vhost, "--formatter", "json",
		"source_name", "destination_name", "destination_kind", "routing_key")
	if err != nil {
		return nil, err
	}
	var bs []Binding
	if err := decodeJSON(out, &bs); err != nil {
		return nil, fmt.Errorf("list_bindings -p %s: %w", vhost, err)
	}
	return bs, nil
}

// decodeJSON reads rabbitmqctl's --formatter json output: one array, and
// nothing after it.
func decodeJSON(out []byte, v any) error {
	if len(bytes.TrimSpace(out)) == 0 {
		return nil // no rows
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("cannot read rabbitmqctl's JSON: %w: %s", err, firstLines(strings.TrimSpace(string(out)), 3))
	}
	if dec.More() {
		return fmt.Errorf("cannot read rabbitmqctl's JSON: more than one value: %s", firstLines(strings.TrimSpace(string(out)), 3))
	}
	return nil
}

func orNone(r json.RawMessage) string {
	if len(r) == 0 {
		return "(none)"
	}
	return string(r)
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}
