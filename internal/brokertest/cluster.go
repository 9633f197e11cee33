package brokertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"eaimq/internal/rabbitctl"
)

// The local three-node cluster of scripts/cluster.sh: eaimqN@localhost on
// 127.0.0.1:568N. Tests make their own vhost on it, as on the lab's node,
// and kill and restart nodes through the script, as an operator would.

const clusterHowTo = "start it with scripts/cluster.sh up (scripts/test.sh does)"

// ClusterSize is the number of nodes scripts/cluster.sh runs.
const ClusterSize = 3

// Cluster is the local cluster, checked to be up with every node a member.
type Cluster struct{}

// ClusterNode is node n's name (1-based).
func ClusterNode(n int) string { return fmt.Sprintf("eaimq%d@localhost", n) }

// ClusterCtl is rabbitmqctl against node n.
func ClusterCtl(n int) rabbitctl.Ctl { return rabbitctl.Ctl{Node: ClusterNode(n)} }

// NeedCluster fails the test, saying how to start it, unless every node
// runs its app and sees the other two as running members.
func NeedCluster(t testing.TB) Cluster {
	t.Helper()
	SkipShort(t, "the local RabbitMQ cluster")
	for n := 1; n <= ClusterSize; n++ {
		out, err := ClusterCtl(n).Run(context.Background(), "-q", "cluster_status", "--formatter", "json")
		if err != nil {
			t.Fatalf("the local cluster's node %s does not answer: %v; %s", ClusterNode(n), err, clusterHowTo)
		}
		var st struct {
			Running []string `json:"running_nodes"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatalf("cluster_status of %s: %v", ClusterNode(n), err)
		}
		if len(st.Running) != ClusterSize {
			t.Fatalf("%s sees running nodes %v, want all %d; %s", ClusterNode(n), st.Running, ClusterSize, clusterHowTo)
		}
	}
	return Cluster{}
}

// VHost makes a temporary vhost on the cluster (a vhost is cluster-wide),
// managed through node 1, whose URL lists all three nodes, node 1 first.
func (Cluster) VHost(t testing.TB) *VHost {
	t.Helper()
	v := NewOn(t, ClusterCtl(1), "amqp://guest:guest@127.0.0.1:5681/")
	var urls []string
	for n := 1; n <= ClusterSize; n++ {
		urls = append(urls, strings.Replace(v.URL, ":5681/", fmt.Sprintf(":%d/", 5680+n), 1))
	}
	v.URL = strings.Join(urls, ",")
	return v
}

// Leader returns the number of the node that holds queue's Raft leader
// in vhost, asked through node via.
func (Cluster) Leader(t testing.TB, via int, vhost, queue string) int {
	t.Helper()
	out, err := ClusterCtl(via).Run(context.Background(), "-q", "list_queues", "-p", vhost, "--formatter", "json", "name", "leader")
	if err != nil {
		t.Fatalf("list_queues leader: %v", err)
	}
	var rows []struct {
		Name   string `json:"name"`
		Leader string `json:"leader"`
	}
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("list_queues leader: %v: %s", err, out)
	}
	for _, r := range rows {
		if r.Name != queue {
			continue
		}
		for n := 1; n <= ClusterSize; n++ {
			if r.Leader == ClusterNode(n) {
				return n
			}
		}
		t.Fatalf("%s's leader is %q, not a node of the local cluster", queue, r.Leader)
	}
	t.Fatalf("no queue %s in %s", queue, vhost)
	return 0
}

// Kill SIGKILLs node n's VM with scripts/cluster.sh kill (a crash, not a
// stop), which returns once the process is gone, and checks the node no
// longer answers. It registers a restart in t.Cleanup, so a failing test
// leaves the cluster whole; Start before then is fine (start is a no-op
// for a running node).
func (c Cluster) Kill(t testing.TB, n int) {
	t.Helper()
	t.Cleanup(func() { c.script(t, "start", n) })
	c.script(t, "kill", n)
	if _, err := ClusterCtl(n).Run(context.Background(), "-q", "eval", "node()."); err == nil {
		t.Fatalf("%s still answers after cluster.sh kill %d", ClusterNode(n), n)
	}
}

// Start starts node n again and waits until it is back in the cluster.
func (c Cluster) Start(t testing.TB, n int) {
	t.Helper()
	c.script(t, "start", n)
}

func (Cluster) script(t testing.TB, verb string, n int) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	sh := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "cluster.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", sh, verb, fmt.Sprint(n)).CombinedOutput()
	if err != nil {
		t.Errorf("scripts/cluster.sh %s %d: %v\n%s", verb, n, err, out)
	}
}
