package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/nodestatus"
	"eaimq/internal/rabbitctl"
)

// TestWatermarkOnTheRealNode sets the node's watermark to relative 0.4 and
// back, as the operator would, and checks brokerstatus tells the two apart.
// It restores whatever setting it found.
func TestWatermarkOnTheRealNode(t *testing.T) {
	vh := brokertest.New(t)
	ctx := context.Background()
	out, err := vh.Ctl.Run(ctx, "status", "--formatter", "json")
	if err != nil {
		t.Fatal(err)
	}
	before, err := nodestatus.ParseStatus(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		restore := []string{"-q", "set_vm_memory_high_watermark"}
		if w := before.Watermark; w.Absolute {
			restore = append(restore, "absolute", strconv.FormatInt(w.Bytes, 10))
		} else {
			restore = append(restore, strconv.FormatFloat(w.Fraction, 'g', -1, 64))
		}
		if _, err := vh.Ctl.Run(ctx, restore...); err != nil {
			t.Errorf("restore watermark: %v", err)
		}
	})
	file := filepath.Join(t.TempDir(), "sub", "status.txt")
	getenv := vh.Getenv(nil)
	runStatus := func(extra ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		err := run(ctx, append([]string{"-node", vh.Ctl.Node, "-o", file}, extra...), getenv, &stdout, &stderr)
		if err != nil {
			stderr.WriteString(err.Error())
		}
		return cli.Code(err), stdout.String(), stderr.String()
	}

	if _, err := vh.Ctl.Run(ctx, "-q", "set_vm_memory_high_watermark", "0.4"); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runStatus("-json")
	if code != cli.ExitConfig || !strings.Contains(stderr, "relative") || !strings.Contains(stderr, "set_vm_memory_high_watermark absolute 512MiB") {
		t.Errorf("relative 0.4: exit %d, want %d with the fix:\n%s", code, cli.ExitConfig, stderr)
	}
	var s nodestatus.Summary
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("-json: %v:\n%s", err, stdout)
	}
	if w := s.Watermark; w.Kind != "relative" || w.Fraction == nil || *w.Fraction != 0.4 || w.Bytes != nil || w.OK || w.WantedBytes != 512<<20 {
		t.Errorf("-json, relative 0.4: watermark %+v", w)
	}

	if _, err := vh.Ctl.Run(ctx, "-q", "set_vm_memory_high_watermark", "absolute", "512MiB"); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runStatus()
	if code != 0 {
		t.Fatalf("absolute 512MiB: exit %d:\n%s", code, stderr)
	}
	saved, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(saved), "Memory high watermark setting: 0.5369 gb, computed to: 0.5369 gb") {
		t.Errorf("status file lacks the absolute watermark line:\n%s", saved)
	}
	if !strings.Contains(stdout, vh.Name) || !strings.Contains(stdout, "run topology") {
		t.Errorf("summary does not list the (empty) vhost's queues:\n%s", stdout)
	}
	if !strings.Contains(stdout, "watermark: absolute 512MiB (536870912 bytes) (ok)") {
		t.Errorf("summary does not give the exact watermark:\n%s", stdout)
	}

	// -json with a queue holding one message: the object parses, with the
	// exact watermark and the queue's counts.
	vh.Topology(t)
	ch := vh.Channel(t)
	if err := ch.Publish("", "claim.in", false, false, amqp.Publishing{Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "claim.in holds 1 message", func() bool { return vh.Depth(t, "claim.in") == 1 })
	code, stdout, stderr = runStatus("-json")
	if code != 0 {
		t.Fatalf("-json, absolute 512MiB: exit %d:\n%s", code, stderr)
	}
	s = nodestatus.Summary{}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil || dec.More() {
		t.Fatalf("-json is not one object with the known fields (%v):\n%s", err, stdout)
	}
	if w := s.Watermark; w.Kind != "absolute" || w.Bytes == nil || *w.Bytes != 512<<20 || w.LimitBytes != 512<<20 || !w.OK || w.Problem != "" {
		t.Errorf("-json, absolute 512MiB: watermark %+v", w)
	}
	conn, err := amqp.Dial(vh.URL)
	if err != nil {
		t.Fatal(err)
	}
	version, _ := conn.Properties["version"].(string)
	conn.Close()
	node := vh.Ctl.Node
	if node == "" { // EAIMQ_RABBITMQCTL's node
		out, err := vh.Ctl.Run(context.Background(), "-q", "eval", "node().")
		if err != nil {
			t.Fatal(err)
		}
		node = strings.Trim(strings.TrimSpace(string(out)), "'")
	}
	if s.Node != node || s.Version != version || s.Saved == nil || *s.Saved != file || s.VHost != vh.Name || s.Alarms == nil {
		t.Errorf("-json: %+v", s)
	}
	found := false
	for _, q := range s.Queues {
		if q.Name == "claim.in" {
			found = q.Messages == 1 && q.Unacked == 0
		}
	}
	if !found {
		t.Errorf("-json: queues %+v, want claim.in with 1 message, 0 unacked", s.Queues)
	}
}

func TestNoSuchNode(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-node", "nobody@localhost", "-o", "-"}, func(string) string { return "" }, &stdout, &stderr)
	if cli.Code(err) != cli.ExitUnavailable || !strings.Contains(err.Error(), "mq-up.sh") {
		t.Errorf("exit %d (%v), want %d naming scripts/mq-up.sh", cli.Code(err), err, cli.ExitUnavailable)
	}
}

// TestBadInput runs the built program, as a script would, with each bad
// input and checks its exit code and the first line of its stderr: the
// mistake itself, not a page of usage.
func TestBadInput(t *testing.T) {
	bin := brokertest.Binary(t, "eaimq/brokerstatus")
	vh := brokertest.New(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		args  []string
		code  int
		first string // the first line of stderr starts with this
	}{
		{[]string{"-watermark", "0"}, 2, `brokerstatus: -watermark: bad size "0": the watermark must be at least 1 byte`},
		{[]string{"-watermark", "0MiB"}, 2, `brokerstatus: -watermark: bad size "0MiB": the watermark must be at least 1 byte`},
		{[]string{"-watermark", "0.4"}, 2, `brokerstatus: -watermark: bad size "0.4": want a whole number of bytes`},
		{[]string{"-watermark", "-5MiB"}, 2, `brokerstatus: -watermark: bad size "-5MiB": want a whole number of bytes`},
		{[]string{"-watermark", "512 MiB"}, 2, `brokerstatus: -watermark: bad size "512 MiB": want a whole number of bytes`},
		{[]string{"-watermark", "512XB"}, 2, `brokerstatus: -watermark: bad size "512XB": unknown unit "XB"`},
		{[]string{"-watermark", "512B"}, 2, `brokerstatus: -watermark: bad size "512B": unknown unit "B"`},
		{[]string{"-watermark", "9999999999GiB"}, 2, `brokerstatus: -watermark: bad size "9999999999GiB": too large`},
		{[]string{"-o", ""}, 2, `brokerstatus: -o wants a file path, or "-" for none`},
		{[]string{"-bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"-node"}, 2, "flag needs an argument: -node"},
		{[]string{"-o", "-", "extra"}, 2, `brokerstatus: unexpected argument "extra"`},
		{[]string{"-node", vh.Ctl.Node, "-o", dir}, 74, "brokerstatus: write " + dir + ": it is a directory"},
		{[]string{"-node", vh.Ctl.Node, "-o", "/dev/full"}, 74, "brokerstatus: write /dev/full (a character device): no space left on device"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = append(os.Environ(), "EAI_AMQP_URL="+vh.URL)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			first, rest, _ := strings.Cut(stderr.String(), "\n")
			if code != tc.code || !strings.HasPrefix(first, tc.first) {
				t.Errorf("exit %d, first line %q; want %d, %q\n%s", code, first, tc.code, tc.first, stderr.String())
			}
			if see := cli.SeeManual("brokerstatus"); tc.code == cli.ExitUsage && rest != see+"\n" {
				t.Errorf("after the mistake, want only %q, got:\n%s", see, rest)
			}
		})
	}
}

// TestManual: -h prints the usage and the flags of the package comment on
// stdout (exit 0), -h full all of it, and it names every flag.
func TestManual(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-h", "full"}} {
		want := cli.Help(doc, "brokerstatus")
		if len(args) == 2 {
			want = cli.Manual(doc)
		}
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, func(string) string { return "" }, &stdout, &stderr)
		if cli.Code(err) != 0 || stdout.String() != want || stderr.Len() != 0 {
			t.Fatalf("%q: exit %d, stderr %q, stdout:\n%s", args, cli.Code(err), stderr.String(), stdout.String())
		}
	}
	m := cli.Manual(doc)
	if !strings.HasPrefix(m, "Brokerstatus saves") || !strings.Contains(m, "130  interrupted") {
		t.Errorf("the manual:\n%s", m)
	}
	for _, name := range []string{"-node", "-o", "-watermark", "-json", "-version"} {
		if !strings.Contains(m, "\t"+name+" ") {
			t.Errorf("the manual does not describe %s", name)
		}
	}
}

// TestVersionAndTypo: -version names the program (exit 0); a mistyped flag
// is two lines on stderr, the mistake and where the manual is (exit 2).
func TestVersionAndTypo(t *testing.T) {
	bin := brokertest.Binary(t, "eaimq/brokerstatus")
	out, err := exec.Command(bin, "-version").Output()
	if err != nil || !strings.HasPrefix(string(out), "brokerstatus ") {
		t.Errorf("-version: %v: %q", err, out)
	}
	cmd := exec.Command(bin, "-bogus")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	want := "flag provided but not defined: -bogus\nrun 'brokerstatus -h' for the manual\n"
	if cmd.ProcessState.ExitCode() != 2 || stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("-bogus: %v, stderr %q, stdout %q; want exit 2 and %q", err, stderr.String(), stdout.String(), want)
	}
}

// TestInterruptWhileWaitingOnNode is issue #10.3: against a node that
// does not exist rabbitmqctl waits about 50 s, and its Erlang VM, a
// grandchild in another session when run as root, kept the pipes open
// after brokerstatus had been interrupted. The gate: the signal is sent
// only once rabbitmqctl's VM runs under brokerstatus, so that it is really
// waiting on the node.
func TestInterruptWhileWaitingOnNode(t *testing.T) {
	bin := brokertest.Binary(t, "eaimq/brokerstatus")
	cmd := exec.Command(bin, "-node", "bogus@nowhere", "-o", "-")
	var stderr brokertest.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })

	var started []int
	brokertest.Eventually(t, 30*time.Second, "rabbitmqctl's Erlang VM running under brokerstatus", func() bool {
		select {
		case <-done:
			t.Fatalf("brokerstatus exited before it was interrupted: %s", stderr.String())
		default:
		}
		started = rabbitctl.Descendants(cmd.Process.Pid)
		for _, pid := range started {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "beam.smp" {
				return true
			}
		}
		return false
	})

	sent := time.Now()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("brokerstatus still running 60s after SIGINT")
	}
	took := time.Since(sent)
	if took > time.Second {
		t.Errorf("brokerstatus exited %s after SIGINT, want within 1s", took.Round(time.Millisecond))
	}
	if code := cmd.ProcessState.ExitCode(); code != cli.ExitInterrupted || !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("exit %d, want %d saying it was interrupted:\n%s", code, cli.ExitInterrupted, stderr.String())
	}
	// Nothing it started outlives it: the VM and its helpers are killed
	// with the group, not left to time out on their own.
	brokertest.Eventually(t, 5*time.Second, "rabbitmqctl's processes gone", func() bool {
		for _, pid := range started {
			if alive(pid) {
				return false
			}
		}
		return true
	})
}

// alive: pid exists and is not a zombie (an exited child whose new parent
// has not reaped it yet holds nothing open).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
