package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/rabbitctl"
)

const defaultStatusFile = "/root/eaimw/mq/status.txt"

// doc is the manual: the package comment in doc.go, printed by -h, so
// that the manual and -h cannot drift apart (as cmd/digraph does).
//
//go:embed doc.go
var doc string

const seeManual = "run 'brokerstatus -h' for the manual"

// exitInterrupted is the shell's code for a program ended by SIGINT
// (128+2); brokerstatus returns it after cleaning up on SIGINT or SIGTERM.
const exitInterrupted = 130

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
	// The flag package prints a parse error itself, then calls Usage:
	// after a mistake one line says where the manual is; -h prints it.
	fs.Usage = func() {}
	node := fs.String("node", "", "RabbitMQ `node` to ask (default: rabbit@localhost if it answers, else rabbitmqctl's default)")
	outFile := fs.String("o", defaultStatusFile, "status `file` to write (\"-\" writes none)")
	wantSize := fs.String("watermark", "512MiB", "absolute memory watermark `size` wanted: bytes, or with a unit k/kiB, M/MiB, G/GiB (1024ⁿ), kB, MB, GB (1000ⁿ)")
	if err := cli.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			io.WriteString(stderr, cli.Manual(doc))
		} else {
			fmt.Fprintln(stderr, seeManual)
		}
		return err
	}
	want, err := ParseSize(*wantSize)
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case err != nil:
		err = fmt.Errorf("-watermark: %w", err)
	case *outFile == "":
		err = errors.New("-o wants a file path, or \"-\" for none")
	}
	if err != nil {
		return cli.Usagef("%v\n%s", err, seeManual)
	}

	ctl := rabbitctl.Ctl{Node: *node}
	if *node == "" {
		if ctl, err = rabbitctl.Detect(ctx); err != nil {
			if ctx.Err() != nil {
				return cli.Exitf(exitInterrupted, "interrupted while looking for a node")
			}
			return cli.Exit(cli.ExitUnavailable, err)
		}
	}
	raw, err := ctl.Run(ctx, "status")
	if err != nil {
		if ctx.Err() != nil {
			return cli.Exitf(exitInterrupted, "interrupted while waiting for node %s; nothing written", ctl.Node)
		}
		return cli.Exitf(cli.ExitUnavailable, "node %s does not answer: %v (start the broker with scripts/mq-up.sh)", ctl.Node, err)
	}
	if *outFile != "-" {
		if err := writeStatus(*outFile, raw); err != nil {
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
		return cli.Exitf(cli.ExitConfig, "%s\n  fix: rabbitmqctl -n %s set_vm_memory_high_watermark absolute %s\n  (or run scripts/mq-up.sh, which sets it)", why, st.Node, FormatSize(want))
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
