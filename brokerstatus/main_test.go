package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/rabbitctl"
)

// TestWatermarkOnTheRealNode sets the node's watermark to relative 0.4 and
// back, as the operator would, and checks brokerstatus tells the two apart.
// It restores whatever setting it found.
func TestWatermarkOnTheRealNode(t *testing.T) {
	vh := brokertest.New(t)
	ctx := context.Background()
	out, err := vh.Ctl.Run(ctx, "status")
	if err != nil {
		t.Fatal(err)
	}
	before, err := ParseStatus(string(out))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		restore := []string{"-q", "set_vm_memory_high_watermark"}
		switch ok, _ := CheckWatermark(before.Watermark, 512<<20); {
		case ok:
			restore = append(restore, "absolute", "512MiB")
		case before.Watermark.Absolute:
			restore = append(restore, "absolute", fmt.Sprint(int64(before.Watermark.Setting*1e9)))
		default:
			restore = append(restore, fmt.Sprint(before.Watermark.Setting))
		}
		if _, err := vh.Ctl.Run(ctx, restore...); err != nil {
			t.Errorf("restore watermark: %v", err)
		}
	})
	file := filepath.Join(t.TempDir(), "sub", "status.txt")
	getenv := vh.Getenv(nil)
	runStatus := func() (int, string, string) {
		var stdout, stderr bytes.Buffer
		err := run(ctx, []string{"-node", vh.Ctl.Node, "-o", file}, getenv, &stdout, &stderr)
		if err != nil {
			stderr.WriteString(err.Error())
		}
		return cli.Code(err), stdout.String(), stderr.String()
	}

	if _, err := vh.Ctl.Run(ctx, "-q", "set_vm_memory_high_watermark", "0.4"); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runStatus()
	if code != cli.ExitConfig || !strings.Contains(stderr, "relative") || !strings.Contains(stderr, "set_vm_memory_high_watermark absolute 512MiB") {
		t.Errorf("relative 0.4: exit %d, want %d with the fix:\n%s", code, cli.ExitConfig, stderr)
	}

	if _, err := vh.Ctl.Run(ctx, "-q", "set_vm_memory_high_watermark", "absolute", "512MiB"); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runStatus()
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
			if tc.code == cli.ExitUsage && strings.TrimSpace(rest) != seeManual {
				t.Errorf("after the mistake, want only %q, got:\n%s", seeManual, rest)
			}
		})
	}
}

// TestManual: -h prints the package comment (exit 0), and it names every
// flag.
func TestManual(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &stdout, &stderr)
	if cli.Code(err) != 0 || !strings.HasPrefix(stderr.String(), "Brokerstatus saves") || !strings.Contains(stderr.String(), "130  interrupted") {
		t.Fatalf("-h: exit %d:\n%s", cli.Code(err), stderr.String())
	}
	for _, name := range []string{"-node", "-o", "-watermark"} {
		if !strings.Contains(stderr.String(), "\t"+name+" ") {
			t.Errorf("the manual does not describe %s", name)
		}
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
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("exit %d, want %d saying it was interrupted:\n%s", code, exitInterrupted, stderr.String())
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
