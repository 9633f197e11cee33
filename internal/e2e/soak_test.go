package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/pgtest"
	"eaimq/internal/retry"
	"eaimq/internal/topo"
)

var soakFor = flag.Duration("soak", time.Minute, "how long TestSoak runs its faults (scripts/soak.sh SECONDS sets it)")

// soakDelays are the consumers' --retry-delays in the soak.
const soakDelays = "1s,3s"

// TestSoak runs two consumers (--retry-delays 1s,3s --pause-when-down, one
// PostgreSQL store), a publisher and a stream of faults for -soak (60 s in
// scripts/test.sh; scripts/soak.sh SECONDS runs it longer): consumers
// SIGKILLed and SIGTERMed and started again, the partner killed and
// brought back, the broker closing the consumers' connections. Of the
// claims, 10% have no documents (422), 5% are BUSY (503 every time), 5%
// are published twice. Then everything runs healthy until claim.in and
// the delay queues are empty, and the accounting is printed: nothing lost,
// nothing unexpected, no claim with more dead copies than were published
// (a forked retry would make two), and calls per claim against the bound
// of one lineage per published copy.
func TestSoak(t *testing.T) {
	t.Parallel()
	s := newSoak(t)
	stopPub := s.publishing()
	s.faults(*soakFor)
	stopPub()
	s.settle()
	s.account()
}

// soak is one soak run's world.
type soak struct {
	*world
	partner *claimsys.Endpoint
	args    []string
	mu      sync.Mutex
	copies  map[string]int    // published copies by guid
	kind    map[string]string // good, nodocs, busy
	cons    []*proc
	faultN  map[string]int
	// publish is held by a publish run and by the fault that closes the
	// vhost's connections: that fault is the broker closing the
	// consumers' connections, and a publisher it cut off would leave
	// claims unconfirmed that the accounting counts as published (on a
	// loaded machine, with the e2e tests in parallel, a batch takes long
	// enough for that to happen).
	publish sync.Mutex
}

func newSoak(t *testing.T) *soak {
	w := newWorld(t)
	w.db = pgtest.New(t)
	if r := w.run("topology", "-retry-delays", soakDelays); r.code != 0 {
		t.Fatalf("topology -retry-delays: %s", r.stderr)
	}
	ep, err := claimsys.Serve(w.partner, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ep.Close)
	w.partner.Set(ms(10))
	s := &soak{world: w, partner: ep, copies: map[string]int{}, kind: map[string]string{}, faultN: map[string]int{}}
	s.args = []string{"--claim", ep.URL(), "--retry-delays", soakDelays, "--pause-when-down", "--prefetch", "5", "--log-level", "warn"}
	for range 2 {
		s.cons = append(s.cons, w.start("consumer", s.args...))
	}
	return s
}

// publishing publishes batches of claims until the returned stop is called.
func (s *soak) publishing() (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for batch := 0; ; batch++ {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			s.publishBatch(batch)
		}
	}()
	return func() { close(done); <-stopped }
}

func (s *soak) publishBatch(batch int) {
	dir := s.t.TempDir()
	var files []string
	for i := range 20 {
		guid := fmt.Sprintf("soak-%05d-%02d", batch, i)
		kind, claimID, docs := "good", "C-"+guid, []string{"r.pdf"}
		switch r := rand.IntN(100); {
		case r < 10:
			kind, docs = "nodocs", nil
		case r < 15:
			kind, claimID = "busy", "BUSY-"+guid
		}
		f := filepath.Join(dir, guid+".json")
		os.WriteFile(f, brokertest.Claim(guid, claimID, docs...), 0o600)
		files = append(files, f)
		n := 1
		if rand.IntN(100) < 5 {
			files, n = append(files, f), 2 // the same file twice: one guid, two copies
		}
		s.mu.Lock()
		s.copies[guid], s.kind[guid] = n, kind
		s.mu.Unlock()
	}
	// publish exits 0 only when every copy is confirmed; under the faults
	// here (none touches the publisher's broker) it always is.
	s.publish.Lock()
	r := s.run("publish", files...)
	s.publish.Unlock()
	if r.code != 0 {
		s.t.Errorf("publish: exit %d: %s", r.code, r.stderr)
	}
}

// faults runs random faults for d.
func (s *soak) faults(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
		i := rand.IntN(len(s.cons))
		switch f := rand.IntN(10); {
		case f < 4:
			s.cons[i].kill()
			s.cons[i] = s.start("consumer", s.args...)
			s.faultN["SIGKILL"]++
		case f < 6:
			s.cons[i].stop(s.t)
			s.cons[i] = s.start("consumer", s.args...)
			s.faultN["SIGTERM"]++
		case f < 8:
			s.partner.Down()
			time.Sleep(time.Duration(500+rand.IntN(2500)) * time.Millisecond)
			if err := s.partner.Up(); err != nil {
				s.t.Fatal(err)
			}
			s.faultN["partner killed"]++
		default:
			s.publish.Lock()
			s.vh.Ctl.Run(context.Background(), "-q", "close_all_connections", "-p", s.vh.Name, "soak: a connection closed by the broker")
			s.publish.Unlock()
			s.faultN["connections closed"]++
		}
	}
}

// settle lets the consumers run healthy until claim.in and the delay
// queues are empty and nothing is unacked, then stops them.
func (s *soak) settle() {
	for i, p := range s.cons {
		if p.exited() {
			s.cons[i] = s.start("consumer", s.args...)
		}
	}
	plan, _ := retry.Parse(soakDelays)
	brokertest.Eventually(s.t, 3*time.Minute, "claim.in and the delay queues drained", func() bool {
		qs := s.vh.Queues(s.t)
		for _, d := range plan.Queues() {
			if qs[retry.QueueName(d)].Messages != 0 {
				return false
			}
		}
		q := qs[topo.Queue]
		return q.Messages == 0 && q.Unacked == 0
	})
	for _, p := range s.cons {
		p.stop(s.t)
	}
}

// account drains claim.dead and holds every claim against what it should
// have become.
func (s *soak) account() {
	dead := map[string]int{}
	for _, d := range s.vh.Drain(s.t, topo.DeadQueue) {
		dead[d.MessageId]++
	}
	st := s.partner.URL()
	stats := getStats(s.t, st)
	var lost, unexpected, forked, deadGood, overCalls, claims int
	maxCalls := map[string]int{}
	for guid, n := range s.copies {
		claims++
		kind, calls := s.kind[guid], stats.ByGuid[guid]
		bound := n // one lineage per copy: a good or a 422 copy is called once
		if kind == "busy" {
			bound = n * (1 + strings.Count(soakDelays, ",") + 1)
		}
		if calls > maxCalls[kind] {
			maxCalls[kind] = calls
		}
		switch {
		case stats.Accepted[guid] == 0 && dead[guid] == 0:
			lost++
			s.t.Errorf("LOST %s (%s): neither delivered nor dead-lettered", guid, kind)
		case dead[guid] > n:
			forked++
			s.t.Errorf("FORKED %s (%s): %d copies in claim.dead of %d published, %d calls", guid, kind, dead[guid], n, calls)
		}
		if kind == "good" && dead[guid] > 0 {
			deadGood++
		}
		if kind != "good" && calls > bound {
			overCalls++
		}
	}
	for guid := range stats.ByGuid {
		if _, ok := s.copies[guid]; !ok {
			unexpected++
		}
	}
	for guid := range dead {
		if _, ok := s.copies[guid]; !ok {
			unexpected++
		}
	}
	if unexpected > 0 {
		s.t.Errorf("%d unexpected claims at the partner or in claim.dead", unexpected)
	}
	var faults []string
	for f, n := range s.faultN {
		faults = append(faults, fmt.Sprintf("%d %s", n, f))
	}
	sort.Strings(faults)
	s.t.Logf("soak %s: %d claims (%s); faults: %s", *soakFor, claims, s.kinds(), strings.Join(faults, ", "))
	lineage := 1 + strings.Count(soakDelays, ",") + 1 // a BUSY copy's calls: the first try and one per delay
	s.t.Logf("accounting: lost %d, unexpected %d, claims with more dead copies than published copies %d, good claims dead-lettered %d; "+
		"calls per claim: most for a good one %d, a 422 %d, a BUSY one %d (a copy's lineage: 1, 1 and %d, plus a call whose answer a kill took before its record); "+
		"422 and BUSY claims over their lineages' calls %d",
		lost, unexpected, forked, deadGood, maxCalls["good"], maxCalls["nodocs"], maxCalls["busy"], lineage, overCalls)
}

func (s *soak) kinds() string {
	n := map[string]int{}
	twice := 0
	for guid, k := range s.kind {
		n[k]++
		if s.copies[guid] == 2 {
			twice++
		}
	}
	return fmt.Sprintf("%d good, %d without documents, %d BUSY, %d published twice", n["good"], n["nodocs"], n["busy"], twice)
}
