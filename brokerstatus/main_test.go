package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
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
