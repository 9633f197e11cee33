package main

import (
	"context"
	_ "embed"
	"io"
	"os"
	"os/signal"
	"syscall"

	"eaimq/internal/cli"
	"eaimq/internal/nodestatus"
)

// doc is the manual: the package comment in doc.go, printed by -h, so
// that the manual and -h cannot drift apart (as cmd/digraph does).
//
//go:embed doc.go
var doc string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	cli.Report(os.Stderr, "brokerstatus", err)
	os.Exit(cli.Code(err))
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	// A signal ends the wait for rabbitmqctl with exit 130, its processes
	// killed (rabbitctl.Ctl.Run).
	if cfg.status.Ctl, err = nodestatus.Find(ctx, cfg.node, getenv); err != nil {
		return err
	}
	return nodestatus.Report(ctx, cfg.status, stdout)
}
