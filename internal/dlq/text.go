package dlq

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A claim is whatever its publisher sent: its body, ids and headers reach a
// person's terminal through list and show, so nothing from a message is
// printed as it came. A terminal obeys ESC sequences (clear the screen, move
// the cursor, set the window title, write to the clipboard), BEL, CR and the
// 8-bit C1 controls; the bidirectional-text controls reorder what the eye
// reads. All of those, and bytes that are not UTF-8, are printed as escapes.

// Clipping widths for text output.
const (
	fieldWidth = 256      // show's fields, header values, messages
	bodyWidth  = 64 << 10 // show's body, in bytes
)

// esc returns s with every character a terminal could act on escaped:
// \xNN for C0 controls, DEL and bytes that are not UTF-8, \uNNNN for C1
// controls, bidi controls and the line and paragraph separators. With
// keepLines, newlines and tabs stay (a body is easier to read with them).
func esc(s string, keepLines bool) string {
	if safe(s, keepLines) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func safe(s string, keepLines bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			return false // decode the slow way
		}
		if (c < 0x20 || c == 0x7f) && !(keepLines && (c == '\n' || c == '\t')) {
			return false
		}
	}
	return true
}

// unsafeRune: a C1 control, a bidirectional-text control, or a line or
// paragraph separator.
func unsafeRune(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// clip shortens s to n characters, ending it with "…".
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, k := 0, 0
	for i < len(s) && k < n-1 {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		k++
	}
	return s[:i] + "…"
}

// field is s escaped and, when long, clipped with its size.
func field(s string) string {
	e := esc(s, false)
	if utf8.RuneCountInString(e) <= fieldWidth {
		return e
	}
	return clip(e, fieldWidth) + fmt.Sprintf(" (%d bytes)", len(s))
}

func scalar(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return field(v)
	case []byte:
		return field(string(v)) + " (bytes)"
	case time.Time:
		return v.UTC().Format(time.RFC3339)
	case amqp.Decimal:
		return fmt.Sprintf("%de-%d", v.Value, v.Scale)
	}
	return field(fmt.Sprint(v))
}

// writeJSON writes v as one line of JSON. encoding/json escapes C0
// controls and replaces bytes that are not UTF-8, but passes DEL, the C1
// controls and the bidi controls through; they are escaped here too, so
// that a person reading the JSON on a terminal is as safe as with text.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	out := buf.Bytes()
	if !safe(string(out), true) {
		// The encoder's output is UTF-8, and these characters can only be
		// inside strings, where \uNNNN means the same.
		var b bytes.Buffer
		for _, r := range string(out) {
			if r == 0x7f || unsafeRune(r) {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
		out = b.Bytes()
	}
	_, err := w.Write(out)
	return err
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

// orDash is s, or "-" for a table cell with nothing in it.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shellWord is id as a person can paste it into a shell: as it is when it
// is made of safe characters only, else single-quoted, and escaped for the
// terminal either way.
func shellWord(id string) string {
	plain := id != "" && !strings.HasPrefix(id, "-")
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:+@/,=", r)) {
			plain = false
			break
		}
	}
	if plain {
		return field(id)
	}
	q := "'" + strings.ReplaceAll(id, "'", `'\''`) + "'"
	if strings.HasPrefix(id, "-") {
		q = "-- " + q
	}
	return field(q)
}
