package main

import (
	"flag"
	"io"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/nodestatus"
)

const defaultStatusFile = "/root/eaimw/mq/status.txt"

// config is what the flags ask for, checked.
type config struct {
	node   string // -node; "" to find one (nodestatus.Find)
	status nodestatus.Config
}

// parseConfig reads the flags in args and the broker address from getenv.
// It runs nothing: every mistake it finds is a usage error (exit 2). -h
// and -version print on stdout and return flag.ErrHelp; the flag
// package's own messages go to stderr.
func parseConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("brokerstatus", flag.ContinueOnError)
	fs.SetOutput(stderr)
	node := fs.String("node", "", "RabbitMQ `node` to ask (default: rabbit@localhost if it answers, else rabbitmqctl's default)")
	outFile := fs.String("o", defaultStatusFile, "status `file` to write (\"-\" writes none)")
	wantSize := fs.String("watermark", "512MiB", "absolute memory watermark `size` wanted: bytes, or with a unit k/kiB, M/MiB, G/GiB (1024ⁿ), kB, MB, GB (1000ⁿ)")
	asJSON := fs.Bool("json", false, "print the summary as one JSON object")
	if err := cli.Flags(fs, doc, args, stdout); err != nil {
		return config{}, err
	}
	want, err := nodestatus.ParseSize(*wantSize)
	switch {
	case fs.NArg() > 0:
		return config{}, cli.Usagef("unexpected argument %q", fs.Arg(0))
	case err != nil:
		return config{}, cli.Usagef("-watermark: %v", err)
	case *outFile == "":
		return config{}, cli.Usagef("-o wants a file path, or \"-\" for none")
	}
	return config{node: *node, status: nodestatus.Config{
		OutFile: *outFile, Want: want, JSON: *asJSON, URL: broker.URL(getenv),
	}}, nil
}
