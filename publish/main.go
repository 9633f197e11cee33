package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"eaimq/internal/cli"
	"eaimq/internal/publish"
)

// doc is the manual: -h prints its package comment.
//
//go:embed doc.go
var doc string

// Exit codes of publish beyond the shared ones: outcomes with no class of
// their own (publish.ErrReturned, publish.ErrNacked).
const (
	exitReturned = 3
	exitNacked   = 4
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	cli.Report(os.Stderr, "publish", err)
	os.Exit(cli.Code(err))
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	// The summary is printed whatever happened after the flags were read.
	s, err := publish.Run(ctx, cfg.publish, stdin, stderr)
	if cfg.json {
		s.WriteJSON(stdout)
	} else {
		fmt.Fprintln(stdout, s.Line())
	}
	// publish.Run has chosen which of the outcomes that apply comes
	// first; the two without a class get publish's own codes.
	switch {
	case errors.Is(err, publish.ErrNacked):
		return cli.Exit(exitNacked, err)
	case errors.Is(err, publish.ErrReturned):
		return cli.Exit(exitReturned, err)
	}
	return err
}
