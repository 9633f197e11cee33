package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/fail"
	"eaimq/internal/redact"
)

// Addresses splits an EAI_AMQP_URL that lists several brokers (the nodes
// of a cluster), separated by commas: "amqp://u:p@h1:5672/v,
// amqp://u:p@h2:5672/v". A comma separates two addresses only where the
// next one begins with amqp:// or amqps://, so a comma inside one address
// (a password may hold one) does not split it. One address gives a list of
// one.
func Addresses(raw string) []string {
	var out []string
	start := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] != ',' {
			continue
		}
		next := strings.ToLower(strings.TrimLeft(raw[i+1:], " \t"))
		if strings.HasPrefix(next, "amqp://") || strings.HasPrefix(next, "amqps://") {
			out = append(out, strings.TrimSpace(raw[start:i]))
			start = i + 1
		}
	}
	return append(out, strings.TrimSpace(raw[start:]))
}

// dialList tries each address of a list in order and returns the first
// connection that opens: the consumer and dlq call it again to reconnect,
// so when the node they were on dies they fail over to the next one that
// answers. A signal ends the walk at once. When none answers, the error
// lists why for each address, and its class is theirs when they all agree
// (all refused the password: NoPerm), else Unavailable.
func (d Dialer) dialList(ctx context.Context, addrs []string) (*amqp.Connection, error) {
	var whys []string
	class := fail.None
	for _, a := range addrs {
		conn, err := d.dialOne(ctx, a)
		if err == nil {
			return conn, nil
		}
		c := fail.Of(err)
		if c == fail.Interrupted || c == fail.Usage {
			return nil, err
		}
		switch class {
		case fail.None:
			class = c
		case c:
		default:
			class = fail.Unavailable
		}
		whys = append(whys, err.Error())
	}
	return nil, fail.New(class, fmt.Errorf("none of the %d brokers in %s answered:\n  %s", len(addrs), EnvURL, strings.Join(whys, "\n  ")))
}

// checkList checks that every address of a list parses and that all name
// the same vhost: they are one cluster's nodes, and the topology lives in
// one vhost.
func checkList(addrs []string) (amqp.URI, error) {
	var first amqp.URI
	for i, a := range addrs {
		u, err := parse(a)
		if err != nil {
			return amqp.URI{}, err
		}
		if i == 0 {
			first = u
			continue
		}
		if u.Vhost != first.Vhost {
			return amqp.URI{}, fail.New(fail.Usage, &URLError{URL: redact.URL(strings.Join(addrs, ",")),
				Why: fmt.Sprintf("its addresses name different vhosts (%q and %q); the nodes of one cluster share the vhost", first.Vhost, u.Vhost)})
		}
	}
	if len(addrs) == 0 || addrs[0] == "" {
		return amqp.URI{}, fail.New(fail.Usage, errors.New("empty AMQP URL"))
	}
	return first, nil
}
