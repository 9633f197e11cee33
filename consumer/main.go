package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"eaimq/internal/cli"
	"eaimq/internal/relay"
)

// doc is the manual: -h prints its package comment, so that the manual and
// the package documentation are one text.
//
//go:embed doc.go
var doc string

func main() {
	// The first signal ends the run gracefully (soft); the second abandons
	// it (hard). run takes both so that tests can drive each.
	hard, cancelHard := context.WithCancel(context.Background())
	soft, cancelSoft := context.WithCancel(hard)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "consumer: %v: finishing the claims in flight (again to exit at once)\n", s)
		cancelSoft()
		<-sigs
		cancelHard()
	}()
	err := run(soft, hard, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	cli.Report(os.Stderr, "consumer", err)
	os.Exit(cli.Code(err))
}

func run(soft, hard context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runHooked(relay.Hooks{}, soft, hard, args, getenv, stdout, stderr)
}

// runHooked is run with hooks into a delivery's way, for tests.
func runHooked(hooks relay.Hooks, soft, hard context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	hopts := &slog.HandlerOptions{Level: cfg.level}
	var handler slog.Handler = slog.NewTextHandler(stderr, hopts)
	if cfg.logJSON {
		handler = slog.NewJSONHandler(stderr, hopts)
	}
	cfg.relay.Log = slog.New(handler)
	cfg.relay.Hooks = hooks
	return relay.Run(soft, hard, cfg.relay, stdout, stderr)
}
