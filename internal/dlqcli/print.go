package dlqcli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"eaimq/internal/dlq"
)

// Text output of the commands; every field from a message goes through the
// engine's escaping (dlq.Field, dlq.Esc: one rule for the whole program).

// cell is s escaped and clipped to a table column.
func cell(s string, width int) string { return dlq.Clip(dlq.Esc(s, false), width) }

// writeHeaders prints AMQP headers one field a line, tables and arrays
// nested below their name, keys sorted.
func writeHeaders(w io.Writer, indent string, h amqp.Table) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		writeValue(w, indent, dlq.Field(k), h[k])
	}
}

func writeValue(w io.Writer, indent, name string, v any) {
	switch v := v.(type) {
	case amqp.Table:
		fmt.Fprintf(w, "%s%s:\n", indent, name)
		writeHeaders(w, indent+"  ", v)
	case []any:
		if !slices.ContainsFunc(v, nested) {
			parts := make([]string, len(v))
			for i, x := range v {
				parts[i] = dlq.Scalar(x)
			}
			fmt.Fprintf(w, "%s%s: [%s]\n", indent, name, strings.Join(parts, ", "))
			return
		}
		fmt.Fprintf(w, "%s%s:\n", indent, name)
		for i, x := range v {
			writeValue(w, indent+"  ", fmt.Sprintf("[%d]", i), x)
		}
	default:
		fmt.Fprintf(w, "%s%s: %s\n", indent, name, dlq.Scalar(v))
	}
}

func nested(v any) bool {
	switch v.(type) {
	case amqp.Table, []any:
		return true
	}
	return false
}

// null is s for JSON, nil (null) when empty.
func null(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nullTime is t for JSON, nil (null) when zero.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
