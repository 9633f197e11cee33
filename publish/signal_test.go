package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/topo"
)

// proc is a publish process under test.
type proc struct {
	cmd        *exec.Cmd
	out, errb  bytes.Buffer
	done       chan struct{}
	signalTime time.Time
}

func startPublish(t *testing.T, url string, stdin *os.File, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(brokertest.Binary(t, "eaimq/publish"), args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), broker.EnvURL+"="+url)
	if stdin != nil {
		p.cmd.Stdin = stdin
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errb
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
	return p
}

// interrupt sends sig and waits for the exit; it fails the test unless the
// process is gone within a second.
func (p *proc) interrupt(t *testing.T, sig os.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	p.signalTime = time.Now()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("publish still running 10s after %v\nstdout: %s\nstderr: %s", sig, p.out.String(), p.errb.String())
	}
	took := time.Since(p.signalTime)
	t.Logf("exit %d %s after %v", p.cmd.ProcessState.ExitCode(), took.Round(time.Millisecond), sig)
	if took > time.Second {
		t.Errorf("publish exited %s after %v, want within 1s", took.Round(time.Millisecond), sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

func waitAccepted(t *testing.T, accepted <-chan struct{}) {
	t.Helper()
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("publish did not dial within 10s")
	}
}

// TestSignalWhileReading: a read that cannot end by itself (a FIFO nobody
// writes to, a standard input nobody closes) ends at SIGINT or SIGTERM:
// exit 130 within a second, saying what it was reading, nothing published.
func TestSignalWhileReading(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "claim.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// An *os.File, so that the child reads the pipe itself and Wait does
	// not wait for a copy that never ends.
	neverClosed, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); neverClosed.Close() })
	cases := []struct {
		name  string
		stdin *os.File
		sig   os.Signal
		args  []string
		want  string
	}{
		{"FIFO without a writer, SIGINT", nil, os.Interrupt, []string{fifo}, "interrupted while reading " + fifo},
		{"FIFO without a writer, SIGTERM", nil, syscall.SIGTERM, []string{fifo}, "interrupted while reading " + fifo},
		{"stdin never closed", neverClosed, os.Interrupt, []string{"-"}, "interrupted while reading -"},
		{"FIFO among files", nil, os.Interrupt, []string{writeClaim(t, dir, "ok.json", `{"guid":"ok"}`), fifo}, fifo},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, accepted := brokertest.SilentBroker(t)
			p := startPublish(t, url, tc.stdin, tc.args...)
			waitAccepted(t, accepted)
			if slices.Contains(tc.args, fifo) {
				// The dial runs beside the reads: the gate is publish
				// really blocked opening the FIFO.
				waitFIFOOpen(t, p.cmd.Process.Pid)
			}
			code := p.interrupt(t, tc.sig)
			first, _, _ := strings.Cut(p.errb.String(), "\n")
			if code != cli.ExitInterrupted || !strings.Contains(first, "interrupted while reading") || !strings.Contains(first, tc.want) || !strings.Contains(first, "nothing published") {
				t.Errorf("exit %d, want %d; first stderr line %q, want %q and nothing published", code, cli.ExitInterrupted, first, tc.want)
			}
		})
	}
}

// waitFIFOOpen waits until a thread of pid is blocked opening a FIFO that
// has no writer (the kernel's wait_for_partner).
func waitFIFOOpen(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", pid))
		for _, task := range tasks {
			if b, _ := os.ReadFile(task); string(b) == "wait_for_partner" {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("publish (pid %d) never blocked opening the FIFO", pid)
}

// TestSignalReadingDevZero: /dev/zero is read to -max-bytes at most (its
// largest value is 128 MiB, a fraction of a second of reading) and refused;
// a signal meanwhile ends it at once. Either way: within a second.
func TestSignalReadingDevZero(t *testing.T) {
	url, accepted := brokertest.SilentBroker(t)
	p := startPublish(t, url, nil, "-max-bytes", strconv.Itoa(maxMaxBytes), "/dev/zero")
	waitAccepted(t, accepted)
	code := p.interrupt(t, os.Interrupt)
	if code != cli.ExitInterrupted && code != cli.ExitDataErr {
		t.Errorf("exit %d, want %d (interrupted) or %d (refused): %s", code, cli.ExitInterrupted, cli.ExitDataErr, p.errb.String())
	}
}

// TestSignalWhileConnecting: the files are read, the broker never answers
// the handshake: SIGINT ends the wait at once, with 130.
func TestSignalWhileConnecting(t *testing.T) {
	url, accepted := brokertest.SilentBroker(t)
	f := writeClaim(t, t.TempDir(), "c.json", `{"guid":"c"}`)
	p := startPublish(t, url, nil, "-timeout", "1h", f)
	waitAccepted(t, accepted)
	code := p.interrupt(t, os.Interrupt)
	// The dial runs beside the read of the file, so on a slow moment the
	// signal may still find the read going: either phase is a true answer.
	// What matters is the wait ending at once (interrupt checks 1 s).
	first, _, _ := strings.Cut(p.errb.String(), "\n")
	if code != cli.ExitInterrupted || !(strings.Contains(first, "interrupted while connecting") || strings.Contains(first, "interrupted while reading")) {
		t.Errorf("exit %d, want %d; first stderr line %q", code, cli.ExitInterrupted, first)
	}
}

var summaryRE = regexp.MustCompile(`publish: (\d+) sent, (\d+) returned, (\d+) nacked, (\d+) invalid, (\d+) changed, (\d+) unconfirmed, (\d+) not sent`)

// TestSignalWhileSending: SIGINT in the middle of a batch stops publishing
// within a second. What the summary calls sent is in claim.in, what it
// calls not sent is not, and only what it calls unconfirmed may or may not
// be: no claim is half-published and none is unaccounted for.
func TestSignalWhileSending(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	dir := t.TempDir()
	const n = 5000
	files := make([]string, n)
	for i := range files {
		files[i] = writeClaim(t, dir, fmt.Sprintf("c%05d.json", i), fmt.Sprintf(`{"guid":"sig-%05d","claimId":"C-%05d","docs":["r.pdf"]}`, i, i))
	}
	p := startPublish(t, vh.URL, nil, append([]string{"-window", "1"}, files...)...)
	brokertest.Eventually(t, 30*time.Second, "publishing under way", func() bool {
		select {
		case <-p.done:
			t.Fatalf("publish ended before the signal: %s%s", p.out.String(), p.errb.String())
		default:
		}
		return vh.Depth(t, topo.Queue) > 0
	})
	code := p.interrupt(t, os.Interrupt)
	m := summaryRE.FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no summary on stdout: %q\nstderr: %s", p.out.String(), p.errb.String())
	}
	t.Logf("%s", m[0])
	count := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	sent, unconfirmed, notSent := count(1), count(6), count(7)
	if sent+unconfirmed+notSent != n || notSent == 0 {
		t.Errorf("summary %q does not account for %d claims, or nothing was left", m[0], n)
	}
	switch {
	case unconfirmed > 0 && code != cli.ExitTempFail, unconfirmed == 0 && code != cli.ExitInterrupted:
		t.Errorf("exit %d with %d unconfirmed; want 75 when some are, 130 when none", code, unconfirmed)
	}
	if !strings.Contains(p.errb.String(), "interrupted") {
		t.Errorf("stderr does not say it was interrupted:\n%s", p.errb.String())
	}
	got := map[string]bool{}
	for _, d := range vh.Drain(t, topo.Queue) {
		if got[d.MessageId] {
			t.Errorf("%s queued twice", d.MessageId)
		}
		got[d.MessageId] = true
	}
	if len(got) < sent || len(got) > sent+unconfirmed {
		t.Errorf("claim.in holds %d, the summary says %d sent and %d unconfirmed", len(got), sent, unconfirmed)
	}
}

// TestStalledAfterHandshake: the node takes the connection and then
// answers nothing on a channel (paused or cut off mid-partition, while its
// heartbeats go on). publish must not wait for it: it exits 69 (nothing
// was published) after -timeout, not never.
func TestStalledAfterHandshake(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	url, stalled := brokertest.StallAfterHandshake(t, vh.URL)
	f := writeClaim(t, t.TempDir(), "c.json", `{"guid":"stalled-1","claimId":"C-S","docs":["r.pdf"]}`)
	start := time.Now()
	p := startPublish(t, url, nil, "-timeout", "2s", f)
	var code int
	select {
	case <-p.done:
		code = p.cmd.ProcessState.ExitCode()
	case <-time.After(20 * time.Second):
		t.Fatalf("publish still running 20s after it started with -timeout 2s: %s", p.errb.String())
	}
	took := time.Since(start)
	select {
	case <-stalled:
	default:
		t.Fatalf("the proxy never dropped a frame: the fault did not happen (exit %d: %s)", code, p.errb.String())
	}
	if code != cli.ExitUnavailable || !strings.Contains(p.errb.String(), "did not open a publishing channel within 2s") {
		t.Errorf("exit %d, want %d naming the stall:\n%s", code, cli.ExitUnavailable, p.errb.String())
	}
	// -timeout for the dial, -timeout for the channel, then the bounded
	// close (2 s) and slack for a loaded machine.
	if took > 2*time.Second+2*time.Second+2*time.Second+4*time.Second {
		t.Errorf("publish took %s with -timeout 2s", took)
	}
	if n := vh.Depth(t, topo.Queue); n != 0 {
		t.Errorf("claim.in holds %d; nothing was published", n)
	}
}

// TestFrozenMidBatch: a node that freezes mid-batch reads nothing more
// and sends nothing more, not even heartbeats. publish's write blocks,
// and after three missed heartbeats (15 s) the library begins to shut
// the connection down, which waits for the channel the blocked publish
// holds. publish must still end at -timeout: it fails the write through
// the socket itself, where the library's close would wait behind that
// shutdown forever. Exit 75, every claim accounted for.
func TestFrozenMidBatch(t *testing.T) {
	vh := brokertest.New(t)
	vh.Topology(t)
	url, frozen := brokertest.FreezeOnPublish(t, vh.URL)
	dir := t.TempDir()
	pad := strings.Repeat("x", 1<<20)
	var files []string
	for i := range 48 {
		files = append(files, writeClaim(t, dir, fmt.Sprintf("big-%02d.json", i),
			fmt.Sprintf(`{"guid":"frozen-%02d","claimId":"C-F%02d","docs":["r.pdf"],"pad":%q}`, i, i, pad)))
	}
	start := time.Now()
	// -timeout 20s: the library's shutdown (15 s of no heartbeat) has
	// begun when the write's bound passes.
	p := startPublish(t, url, nil, append([]string{"-timeout", "20s", "-json"}, files...)...)
	var code int
	select {
	case <-p.done:
		code = p.cmd.ProcessState.ExitCode()
	case <-time.After(90 * time.Second):
		p.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, on stderr
		<-p.done
		t.Fatalf("publish still running 90s after it started with -timeout 20s:\n%s", p.errb.String())
	}
	took := time.Since(start)
	select {
	case <-frozen:
	default:
		t.Fatalf("the proxy never froze: the fault did not happen (exit %d: %s)", code, p.errb.String())
	}
	if code != cli.ExitTempFail || !strings.Contains(p.errb.String(), "stopped reading") {
		t.Errorf("exit %d, want %d saying the broker stopped reading:\n%s", code, cli.ExitTempFail, p.errb.String())
	}
	var sum struct {
		Sent        int `json:"sent"`
		Unconfirmed int `json:"unconfirmed"`
		NotSent     int `json:"not_sent"`
	}
	if err := json.Unmarshal(p.out.Bytes(), &sum); err != nil || sum.Sent+sum.Unconfirmed+sum.NotSent != len(files) {
		t.Errorf("summary %q does not account for %d claims (%v)", p.out.String(), len(files), err)
	}
	// -timeout, the bounded close, and slack for a loaded machine.
	if took > 20*time.Second+2*time.Second+15*time.Second {
		t.Errorf("publish took %s with -timeout 20s", took)
	}
}
