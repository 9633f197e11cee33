package brokertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"eaimq/internal/rabbitctl"
)

const howToStartCluster = "start it with scripts/cluster.sh up (as root; it installs rabbitmq-server when missing)"

// Cluster is the local three-node cluster of scripts/cluster.sh:
// eaimqN@localhost with AMQP on 127.0.0.1:568N, for N = 1, 2, 3.
type Cluster struct {
	script string
}

// ClusterNode is one node of the Cluster.
type ClusterNode struct {
	N    int
	Name string // eaimqN@localhost
	Port int    // its AMQP port
	Ctl  rabbitctl.Ctl
}

// Node returns node n (1, 2 or 3).
func (c *Cluster) Node(n int) ClusterNode {
	name := fmt.Sprintf("eaimq%d@localhost", n)
	return ClusterNode{N: n, Name: name, Port: 5680 + n, Ctl: rabbitctl.Ctl{Node: name}}
}

// Nodes are the three nodes, in order.
func (c *Cluster) Nodes() []ClusterNode {
	return []ClusterNode{c.Node(1), c.Node(2), c.Node(3)}
}

// NodeNamed returns the node whose Erlang name is name.
func (c *Cluster) NodeNamed(t testing.TB, name string) ClusterNode {
	t.Helper()
	for _, n := range c.Nodes() {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("%q is not a node of the local cluster", name)
	return ClusterNode{}
}

// Running reports whether node n's RabbitMQ application runs (not only
// its Erlang VM, which also answers between stop_app and start_app).
func (n ClusterNode) Running() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := n.Ctl.Run(ctx, "-q", "eval", "rabbit:is_running().")
	return err == nil && strings.TrimSpace(string(out)) == "true"
}

// Down reports whether node n is really gone: rabbitmqctl cannot reach it
// and its AMQP port refuses connections.
func (n ClusterNode) Down() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := n.Ctl.Run(ctx, "-q", "eval", "node()."); err == nil {
		return false
	}
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.Port), time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return true
}

// ClusterUp brings the local cluster up with scripts/cluster.sh up, or
// fails the test with how to start it. When the test ends, the nodes that
// were not running before are stopped again (their data stays), so that
// the machine is left as the test found it; a cluster that was running is
// left running.
func ClusterUp(t testing.TB) *Cluster {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	c := &Cluster{script: filepath.Join(filepath.Dir(file), "..", "..", "scripts", "cluster.sh")}
	var wasDown []ClusterNode
	for _, n := range c.Nodes() {
		if !n.Running() {
			wasDown = append(wasDown, n)
		}
	}
	if len(wasDown) > 0 {
		// Registered before the cluster is started (and before any vhost
		// on it), so it runs last, after the vhosts are deleted; and even
		// when up fails halfway.
		t.Cleanup(func() {
			for _, n := range wasDown {
				if _, err := n.Ctl.Run(context.Background(), "-q", "stop"); err != nil && !n.Down() {
					t.Errorf("stop %s, which was not running before the test: %v", n.Name, err)
				}
			}
		})
	}
	if out, err := c.script1(t, "up"); err != nil {
		t.Fatalf("scripts/cluster.sh up: %v\n%s\n%s", err, out, howToStartCluster)
	}
	for _, n := range c.Nodes() {
		if !n.Running() {
			t.Fatalf("%s is not running after scripts/cluster.sh up; %s", n.Name, howToStartCluster)
		}
	}
	return c
}

func (c *Cluster) script1(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", append([]string{c.script}, args...)...).CombinedOutput()
	return string(out), err
}

// Kill crashes node n (SIGKILL of its Erlang VM, scripts/cluster.sh kill)
// and waits until it is really down. If the test does not start it again,
// its cleanup does, so the cluster is left whole.
func (c *Cluster) Kill(t testing.TB, n int) {
	t.Helper()
	node := c.Node(n)
	t.Cleanup(func() {
		if !node.Running() {
			if out, err := c.script1(t, "start", fmt.Sprint(n)); err != nil {
				t.Errorf("restart %s after the test: %v\n%s", node.Name, err, out)
			}
		}
	})
	if out, err := c.script1(t, "kill", fmt.Sprint(n)); err != nil {
		t.Fatalf("scripts/cluster.sh kill %d: %v\n%s", n, err, out)
	}
	Eventually(t, 30*time.Second, node.Name+" down", node.Down)
}

// Start starts node n again (scripts/cluster.sh start) and waits until
// the other nodes see it running in the cluster.
func (c *Cluster) Start(t testing.TB, n int) {
	t.Helper()
	node := c.Node(n)
	if out, err := c.script1(t, "start", fmt.Sprint(n)); err != nil {
		t.Fatalf("scripts/cluster.sh start %d: %v\n%s", n, err, out)
	}
	Eventually(t, 60*time.Second, node.Name+" running in the cluster again", func() bool {
		return node.Running() && slices.Contains(c.RunningNodes(t, c.other(n)), node.Name)
	})
}

func (c *Cluster) other(n int) int { return n%3 + 1 }

// RunningNodes is cluster_status's running_nodes as node n sees them.
func (c *Cluster) RunningNodes(t testing.TB, n int) []string {
	t.Helper()
	out, err := c.Node(n).Ctl.Run(context.Background(), "-q", "cluster_status", "--formatter", "json")
	if err != nil {
		return nil
	}
	var st struct {
		Running []string `json:"running_nodes"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("cluster_status of %s: %v\n%s", c.Node(n).Name, err, out)
	}
	return st.Running
}

// VHost makes a temporary vhost on the cluster (through node 1), deleted
// when the test ends; its URL reaches node 1.
func (c *Cluster) VHost(t testing.TB) *VHost {
	t.Helper()
	n := c.Node(1)
	return NewOn(t, n.Ctl, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.Port))
}

// On is vh reached through node n: its URL names n's AMQP port, and its
// rabbitmqctl talks to n. A vhost is the cluster's, on every node.
func (c *Cluster) On(t testing.TB, vh *VHost, n int) *VHost {
	t.Helper()
	u, err := url.Parse(vh.URL)
	if err != nil {
		t.Fatal(err)
	}
	node := c.Node(n)
	u.Host = fmt.Sprintf("127.0.0.1:%d", node.Port)
	return &VHost{Name: vh.Name, URL: u.String(), Ctl: node.Ctl}
}

// QueueInfo is one quorum queue as list_queues shows it.
type QueueInfo struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Leader  string   `json:"leader"`
	Members []string `json:"members"`
}

// QueueInfo reads queue's type, leader and members with rabbitmqctl
// list_queues on node n.
func (c *Cluster) QueueInfo(t testing.TB, vhost, queue string, n int) QueueInfo {
	t.Helper()
	out, err := c.Node(n).Ctl.Run(context.Background(), "-q", "list_queues", "-p", vhost, "name", "type", "leader", "members", "--formatter", "json")
	if err != nil {
		t.Fatal(err)
	}
	var qs []QueueInfo
	if err := json.Unmarshal(out, &qs); err != nil {
		t.Fatalf("list_queues: %v\n%s", err, out)
	}
	for _, q := range qs {
		if q.Name == queue {
			return q
		}
	}
	t.Fatalf("queue %s not in vhost %s:\n%s", queue, vhost, out)
	return QueueInfo{}
}
