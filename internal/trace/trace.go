// Package trace carries a W3C Trace Context traceparent from the file to
// the partner: publish puts $TRACEPARENT on each message as a header of the
// same name, the consumer forwards it to the claim system and logs its
// trace id, so that one claim can be followed end to end.
package trace

import (
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Header is the message header (and the HTTP header) that carries it; Env
// is the variable publish reads it from.
const (
	Header = "traceparent"
	Env    = "TRACEPARENT"
)

// Parse checks a traceparent (version-traceid-parentid-flags, lowercase
// hex, W3C Trace Context §3.2) and returns its trace id. Version ff and
// all-zero ids are invalid; a later version may carry more fields after
// the four.
func Parse(s string) (traceID string, ok bool) {
	f := strings.Split(s, "-")
	if len(f) < 4 || (f[0] == "00" && len(f) != 4) {
		return "", false
	}
	for i, n := range []int{2, 32, 16, 2} {
		if len(f[i]) != n || strings.Trim(f[i], "0123456789abcdef") != "" {
			return "", false
		}
	}
	if f[0] == "ff" || strings.Trim(f[1], "0") == "" || strings.Trim(f[2], "0") == "" {
		return "", false
	}
	return f[1], true
}

// Headers are the message headers for traceparent tp ("" gives none).
func Headers(tp string) (amqp.Table, error) {
	if tp == "" {
		return nil, nil
	}
	if _, ok := Parse(tp); !ok {
		return nil, fmt.Errorf("%s %q is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)", Env, tp)
	}
	return amqp.Table{Header: tp}, nil
}

// From returns the message's traceparent and trace id, if it has a valid
// one; an invalid one is ignored, as the W3C recommendation says.
func From(h amqp.Table) (tp, traceID string) {
	s, _ := h[Header].(string)
	if id, ok := Parse(s); ok {
		return s, id
	}
	return "", ""
}
