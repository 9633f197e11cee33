// Topology declares the claim relay's exchanges, queues and bindings in the
// vhost of EAI_AMQP_URL, or with -check verifies them and changes nothing.
//
// It is the drop-in for the lab's topology.py and takes the same (no)
// arguments. Running it twice is safe: redeclaring an object with the same
// properties does nothing.
//
// Usage:
//
//	topology [-check] [-timeout d]
//
// What it declares, in this order (the dead-letter side first, so that
// claim.in never names a dead-letter exchange that does not exist yet):
//
//	exchange eai.dlx     direct, durable
//	exchange eai.claim   direct, durable
//	queue    claim.dead  durable
//	queue    claim.in    durable, x-dead-letter-exchange=eai.dlx,
//	                     x-dead-letter-routing-key=claim.dead
//	binding  eai.claim -> claim.in   key claim
//	binding  eai.dlx   -> claim.dead key claim.dead
//
// If an object already exists with other properties, the broker answers
// 406 PRECONDITION_FAILED; topology prints which property differs, what it
// wants, and what to do, and exits 78.
//
// With -check it declares nothing new: a passive declare tells whether each
// exchange and queue exists, an existing one is redeclared with the wanted
// properties (a no-op when they match, a 406 when they differ), and the
// bindings are read with rabbitmqctl list_bindings when the broker is on this
// machine (AMQP 0-9-1 cannot list them). Each missing or differing piece is
// reported on its own line.
//
// Environment:
//
//	EAI_AMQP_URL   broker address (default amqp://guest:guest@127.0.0.1:5672/%2F);
//	               amqps:// speaks TLS 1.2 or later and checks the broker's
//	               certificate against the URL's host name
//	EAI_AMQP_CA    PEM file of the CA that signs the broker's certificate
//	               (default: the system's roots)
//	EAI_AMQP_CERT  PEM client certificate and its key, for a broker that
//	EAI_AMQP_KEY   asks for one
//
// No message shows the password of EAI_AMQP_URL, however the URL is
// malformed. A connection that fails says on its first line what to do.
//
// Exit status:
//
//	0    declared (or, with -check, everything is as the contract says)
//	2    usage error, or an EAI_AMQP_URL that cannot be used (unparsable,
//	     port out of range)
//	69   the broker cannot be reached: refused, unreachable, no answer
//	     within -timeout, or amqps:// against a port that does not speak TLS
//	77   the broker refused the user or password
//	78   an object differs from the contract (406), or -check found one
//	     missing or different; or the vhost does not exist; or a TLS
//	     setting is wrong (the broker's certificate is not trusted or not
//	     valid for the URL's host, a certificate file cannot be read)
//	130  interrupted (SIGINT, SIGTERM) while connecting
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/topo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	cli.Report(os.Stderr, "topology", err)
	os.Exit(cli.Code(err))
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topology", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.Bool("check", false, "verify the topology and change nothing")
	timeout := fs.Duration("timeout", 10*time.Second, "connection `timeout`")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: topology [-check] [-timeout d]\n\n"+
			"Declares (or with -check verifies) eai.claim, eai.dlx, claim.in, claim.dead\n"+
			"and their bindings in the vhost of EAI_AMQP_URL. Safe to run twice.\n\nflags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nexit status: 0 ok, 2 usage or unusable EAI_AMQP_URL, 69 broker unreachable,\n"+
			"77 user or password refused, 78 topology differs or is missing, vhost unknown or a TLS\n"+
			"setting wrong, 130 interrupted while connecting\n")
	}
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	raw := broker.URL(getenv)
	vhost, err := broker.VHost(raw)
	if err != nil {
		return err // exit 2: the URL is an argument
	}
	// The dial's error carries its own exit code (69, 77, 78, 130).
	conn, err := broker.Dialer{Program: "topology", Timeout: *timeout, Getenv: getenv}.Dial(ctx, raw)
	if err != nil {
		return err
	}
	defer broker.Close(conn)

	if *check {
		return runCheck(ctx, conn, raw, vhost, stdout)
	}
	if err := topo.Declare(conn); err != nil {
		return explain(err, vhost)
	}
	fmt.Fprintf(stdout, "topology: declared %d exchanges, %d queues, %d bindings in vhost %q (%s)\n",
		len(topo.Exchanges), len(topo.Queues), len(topo.Bindings), vhost, broker.Redact(raw))
	return nil
}

// explain turns a failed declaration into a message that says what differs,
// what the contract wants, and what to do.
func explain(err error, vhost string) error {
	var de *topo.DeclareError
	if !errors.As(err, &de) {
		return cli.Exit(cli.ExitUnavailable, err)
	}
	switch broker.Code(err) {
	case 406:
		return cli.Exitf(cli.ExitConfig, "%s %s already exists in vhost %q with other properties: %s\n"+
			"  wanted: %s\n"+
			"  remedy: an existing %s cannot be changed in place. If it is empty, delete it\n"+
			"          (rabbitmqctl -p %s delete_%s %s) and run topology again; if it holds\n"+
			"          claims, move them out first (a shovel): deleting a queue deletes its messages",
			de.Kind, de.Name, vhost, broker.Reason(err), de.Object, de.Kind, vhost, de.Kind, de.Name)
	case 403:
		return cli.Exitf(cli.ExitConfig, "%s: access refused in vhost %q: %s (the user needs configure permission)", de.Object, vhost, broker.Reason(err))
	}
	return cli.Exit(cli.ExitUnavailable, err)
}
