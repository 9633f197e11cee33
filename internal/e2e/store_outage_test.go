package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/pgtest"
)

// Fault-suite rows for a dedup store that stops answering for a while:
// the consumers wait it out (issue 21), holding claims back, and go on when
// it answers; nothing is lost, nothing dead-lettered, exit 0 at the end.

// TestFaultPostgresCrashed: three consumers share a PostgreSQL store on a
// server of the test's own, which crashes (pg_ctl stop -m immediate) while
// calls are at the partner, stays down for 5 s, then 45 s, and starts
// again each time.
func TestFaultPostgresCrashed(t *testing.T) {
	t.Parallel() // the outages are 50 s of waiting: not in the serial part of the run
	for _, down := range []time.Duration{5 * time.Second, 45 * time.Second} {
		t.Run(down.String(), func(t *testing.T) {
			t.Parallel()
			storeOutage(t, down)
		})
	}
}

func storeOutage(t *testing.T, down time.Duration) {
	const claims, prefetch, consumers = 300, 5, 3
	w := newWorld(t)
	pg := pgtest.PrivateServer(t)
	w.db = pg.URL
	w.partner.Set(ms(20))
	published := w.publishFiles(brokertest.Claims("pgdown", "C-pgdown", claims, true)...)
	var ps []*proc
	for range consumers {
		ps = append(ps, w.start("consumer", "--claim", w.url, "--max-seconds", fmt.Sprint(int(down.Seconds())+35),
			"--prefetch", fmt.Sprint(prefetch), "--json"))
	}
	brokertest.Eventually(t, 60*time.Second, "a third delivered", func() bool { return len(w.partner.Stats().Accepted) >= claims/3 })
	pg.Crash(t)
	crashed := time.Now()
	// The fault, held until every consumer has met it.
	brokertest.Eventually(t, 30*time.Second, "each consumer holding back for the store", func() bool {
		for _, p := range ps {
			if p.exited() {
				t.Fatalf("a consumer exited while the store was down: %s", p.errb.String())
			}
			if !strings.Contains(p.errb.String(), "the dedup store is unavailable") {
				return false
			}
		}
		return true
	})
	before := w.partner.Stats().Total
	time.Sleep(time.Until(crashed.Add(down)))
	if calls := w.partner.Stats().Total - before; calls > consumers*prefetch {
		t.Errorf("%d calls started while the store was down, want none beyond those in flight", calls)
	}
	pg.Start(t)
	brokertest.Eventually(t, 90*time.Second, "every claim delivered", func() bool { return len(w.partner.Stats().Accepted) == claims })
	for i, p := range ps {
		select {
		case <-p.done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("consumer %d did not end at its deadline", i)
		}
		if code := p.cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(p.out.String(), `"store_outages":1`) {
			t.Errorf("consumer %d: exit %d, want 0 with the outage in its summary:\n%s%s", i, code, p.out.String(), p.errb.String())
		}
	}
	w.account(fmt.Sprintf("PostgreSQL store crashed for %s, three consumers", down), published, consumers*prefetch,
		fmt.Sprintf("≤ %d consumers × prefetch %d", consumers, prefetch), "each waits it out and goes on; exit 0 at its deadline")
}

// TestFaultSQLiteDiskFull: the consumer's SQLite store lives on a small
// file system that fills up mid-run (writes fail with SQLITE_FULL and
// ENOSPC) and is freed again. The consumer holds back while it is full and
// goes on once there is room.
func TestFaultSQLiteDiskFull(t *testing.T) {
	t.Parallel()
	const claims, prefetch = 200, 5
	w := newWorld(t)
	fsdir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", fsdir).CombinedOutput(); err != nil {
		t.Fatalf("mount a 4 MiB tmpfs for the store (the tests run as root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", fsdir).Run() })
	w.db = filepath.Join(fsdir, "processed.db")
	w.partner.Set(ms(20))
	published := w.publishFiles(brokertest.Claims("full", "C-full", claims, true)...)
	p := w.start("consumer", "--claim", w.url, "--max-seconds", "40", "--prefetch", fmt.Sprint(prefetch), "--json")
	brokertest.Eventually(t, 60*time.Second, "a quarter delivered", func() bool { return len(w.partner.Stats().Accepted) >= claims/4 })
	filler := filepath.Join(fsdir, "filler")
	fill(t, filler)
	brokertest.Eventually(t, 30*time.Second, "the consumer holding back for the full disk", func() bool {
		if p.exited() {
			t.Fatalf("the consumer exited on a full disk: %s", p.errb.String())
		}
		return strings.Contains(p.errb.String(), "the dedup store is unavailable")
	})
	held := len(w.partner.Stats().Accepted)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 60*time.Second, "every claim delivered", func() bool { return len(w.partner.Stats().Accepted) == claims })
	<-p.done
	if code := p.cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(p.out.String(), `"store_outages"`) {
		t.Errorf("exit %d, want 0 with the outage in its summary:\n%s%s", code, p.out.String(), p.errb.String())
	}
	w.account("SQLite store's file system full, then freed", published, prefetch, fmt.Sprintf("≤ prefetch %d", prefetch),
		fmt.Sprintf("%d delivered when the disk filled; the rest after it was freed", held))
}

// fill writes to path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !strings.Contains(err.Error(), syscall.ENOSPC.Error()) {
				t.Fatalf("fill the file system: %v", err)
			}
			return
		}
	}
}
