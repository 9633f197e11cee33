package dlq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// decodeTyped reads what encodeTable wrote, as decodeTable does, in one
// pass over the bytes: no tree of map[string]any and json.Number between
// the text and the AMQP values. A whole `dlq list` decodes two tables a
// row (headers, properties), a million rows of them; through
// encoding/json's generic tree that was most of the list's CPU (pprof:
// 14 of 35 s for the million), here it is a few allocations a value.
//
// It takes what decodeTable takes and gives the same values
// (TestDecodeTypedAsDecodeTable): JSON with whitespace anywhere, escapes
// in strings, and anything after the first value ignored, as a
// json.Decoder ignores it.
func decodeTyped(b []byte) (amqp.Table, error) {
	p := typedParser{b: b}
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	t, ok := v.(amqp.Table)
	if !ok {
		return nil, fmt.Errorf("not a table")
	}
	return t, nil
}

type typedParser struct {
	b []byte
	i int
}

func (p *typedParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek is the next byte that is not whitespace (0 at the end).
func (p *typedParser) peek() byte {
	p.ws()
	if p.i >= len(p.b) {
		return 0
	}
	return p.b[p.i]
}

func (p *typedParser) expect(c byte) error {
	if p.peek() != c {
		return p.errorf("want %q", c)
	}
	p.i++
	return nil
}

func (p *typedParser) errorf(format string, a ...any) error {
	return fmt.Errorf("typed JSON at byte %d: %s", p.i, fmt.Sprintf(format, a...))
}

// value is a string, a bool, null, a list, or an object of one member
// that names its type.
func (p *typedParser) value() (any, error) {
	switch c := p.peek(); c {
	case '"':
		s, err := p.str()
		if v, ok := commonValue[s]; ok {
			return v, err // no copy of the string into an interface
		}
		return s, err
	case '[':
		return p.list()
	case '{':
		p.i++
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		v, err := p.member(k)
		if err != nil {
			return nil, err
		}
		if p.peek() != '}' {
			return nil, p.errorf("a typed value has one member")
		}
		p.i++
		return v, nil
	case 't', 'f', 'n':
		for _, lit := range []struct {
			s string
			v any
		}{{"true", true}, {"false", false}, {"null", nil}} {
			if bytes.HasPrefix(p.b[p.i:], []byte(lit.s)) {
				p.i += len(lit.s)
				return lit.v, nil
			}
		}
	}
	return nil, p.errorf("unexpected value")
}

// key is an object's member name and its colon.
func (p *typedParser) key() (string, error) {
	if p.peek() != '"' {
		return "", p.errorf("want a member name")
	}
	k, err := p.str()
	if err != nil {
		return "", err
	}
	return k, p.expect(':')
}

// str is a JSON string. Without escapes, and valid UTF-8 (what
// json.Marshal writes for everything but a quote, a backslash or a
// control character), it is the bytes as they are; else encoding/json
// reads it, so that an escape or a bad byte means what it meant.
func (p *typedParser) str() (string, error) {
	start := p.i
	p.i++ // the quote
	plain := true
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			raw := p.b[start+1 : p.i-1]
			if s, ok := common[string(raw)]; ok { // no copy made for the lookup
				return s, nil
			}
			if plain && utf8.Valid(raw) {
				return string(raw), nil
			}
			var s string
			if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
				return "", err
			}
			return s, nil
		case c == '\\':
			plain = false
			p.i += 2
		case c < 0x20:
			return "", p.errorf("a control character in a string")
		default:
			p.i++
		}
	}
	return "", p.errorf("a string without its end")
}

// common are the names and values that nearly every dead letter's
// headers and properties hold (x-death's, the topology's), kept once
// rather than a copy each per row: half of a row's allocations otherwise.
var common = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{"x-death", "count", "exchange", "queue", "reason", "routing-keys", "time",
		"x-first-death-exchange", "x-first-death-queue", "x-first-death-reason", "x-last-death-exchange",
		"x-last-death-queue", "x-last-death-reason", "x-delivery-count", "x-eaimq-replays", "original-expiration",
		"rejected", "delivery_limit", "expired", "maxlen",
		"content_type", "content_encoding", "delivery_mode", "message_id", "correlation_id", "timestamp", "type",
		"application/json", "eai.claim", "claim.in", "claim", "claim.dead", "table", "int64", "uint8",
	} {
		m[s] = s
	}
	return m
}()

// commonValue are common's strings as values, each boxed once.
var commonValue = func() map[string]any {
	m := make(map[string]any, len(common))
	for s := range common {
		m[s] = s
	}
	return m
}()

func (p *typedParser) list() ([]any, error) {
	p.i++ // [
	l := []any{}
	if p.peek() == ']' {
		p.i++
		return l, nil
	}
	for {
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		l = append(l, v)
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return l, nil
		default:
			return nil, p.errorf("want , or ]")
		}
	}
}

// number is a JSON number's text.
func (p *typedParser) number() (string, error) {
	p.ws()
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			p.i++
			continue
		}
		break
	}
	if start == p.i {
		return "", p.errorf("want a number")
	}
	return string(p.b[start:p.i]), nil
}

// member is the value of a typed value's one member k.
func (p *typedParser) member(k string) (any, error) {
	integer := func(bits int) (int64, error) {
		s, err := p.number()
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(s, 10, bits)
	}
	unsigned := func(bits int) (uint64, error) {
		s, err := p.number()
		if err != nil {
			return 0, err
		}
		return strconv.ParseUint(s, 10, bits)
	}
	str := func() (string, error) {
		if p.peek() != '"' {
			return "", p.errorf("%s: not a string", k)
		}
		return p.str()
	}
	switch k {
	case "int8":
		n, err := integer(8)
		return int8(n), err
	case "uint8":
		n, err := unsigned(8)
		return uint8(n), err
	case "int16":
		n, err := integer(16)
		return int16(n), err
	case "uint16":
		n, err := unsigned(16)
		return uint16(n), err
	case "int32":
		n, err := integer(32)
		return int32(n), err
	case "uint32":
		n, err := unsigned(32)
		return uint32(n), err
	case "int64":
		return integer(64)
	case "float32", "float64":
		s, err := p.number()
		if err != nil {
			return nil, err
		}
		if k == "float32" {
			f, err := strconv.ParseFloat(s, 32)
			return float32(f), err
		}
		return strconv.ParseFloat(s, 64)
	case "time":
		s, err := str()
		if err != nil {
			return nil, err
		}
		return time.Parse(time.RFC3339Nano, s)
	case "bytes", "string64":
		s, err := str()
		if err != nil {
			return nil, err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if k == "string64" {
			return string(b), err
		}
		return b, err
	case "decimal":
		return p.decimal()
	case "table":
		return p.table()
	}
	return nil, fmt.Errorf("unknown type %q", k)
}

func (p *typedParser) decimal() (amqp.Decimal, error) {
	var d amqp.Decimal
	if err := p.expect('{'); err != nil {
		return d, err
	}
	if p.peek() == '}' {
		p.i++
		return d, nil
	}
	for {
		f, err := p.key()
		if err != nil {
			return d, err
		}
		n, err := p.number()
		if err != nil {
			return d, fmt.Errorf("decimal: %w", err)
		}
		switch strings.ToLower(f) {
		case "scale":
			v, err := strconv.ParseUint(n, 10, 8)
			if err != nil {
				return d, fmt.Errorf("decimal: %w", err)
			}
			d.Scale = uint8(v)
		case "value":
			v, err := strconv.ParseInt(n, 10, 32)
			if err != nil {
				return d, fmt.Errorf("decimal: %w", err)
			}
			d.Value = int32(v)
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return d, nil
		default:
			return d, p.errorf("want , or }")
		}
	}
}

func (p *typedParser) table() (amqp.Table, error) {
	if err := p.expect('{'); err != nil {
		return nil, err
	}
	t := amqp.Table{}
	if p.peek() == '}' {
		p.i++
		return t, nil
	}
	for {
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		v, err := p.value()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		t[k] = v
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return t, nil
		default:
			return nil, p.errorf("want , or }")
		}
	}
}
