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
	b    []byte
	i    int
	lean *leanTables // decodeHeadersLean's
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
		"int8", "int16", "uint16", "int32", "uint32", "float32", "float64", "time", "bytes", "string64", "decimal",
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
		if more, err := p.more(']'); err != nil {
			return nil, err
		} else if !more {
			return l, nil
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
		if more, err := p.more('}'); err != nil {
			return d, err
		} else if !more {
			return d, nil
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
		if more, err := p.more('}'); err != nil {
			return nil, err
		} else if !more {
			return t, nil
		}
	}
}

// decodeHeadersLean reads from headers as encodeTable wrote them only what
// parseHeaders reads of a dead letter (leanHeaders; of x-death, the first
// entry's queue, reason, count and time): the table that parseHeaders,
// given it, reads the same fields from as from decodeTyped's whole table.
// The rest is skipped without a value made of it: a whole `dlq list`
// decoded every header of a million rows, an AMQP table with its maps,
// lists and strings each, to print five fields (pprof: 2.2 of 13 s).
//
// It refuses what decodeTyped refuses (TestLeanHeadersAsTyped): what it
// skips it still reads as decodeTyped would, making no table, list or
// string of it. On an error the caller reads the whole row instead
// (deadOfRowLean), as deadOfRow does.
//
// The tables it returns are lt's, made again by its next call: the
// caller keeps what parseHeaders takes out of them, not them.
func (lt *leanTables) decodeHeadersLean(b []byte) (amqp.Table, error) {
	p := typedParser{b: b, lean: lt}
	if err := p.expect('{'); err != nil {
		return nil, err
	}
	k, err := p.key()
	if err != nil {
		return nil, err
	}
	if k != "table" {
		return nil, p.errorf("not a table")
	}
	if lt.top == nil {
		lt.top, lt.death = amqp.Table{}, amqp.Table{}
	}
	t, err := p.tableOf(lt.top, leanHeaders)
	if err != nil {
		return nil, err
	}
	if p.peek() != '}' {
		return nil, p.errorf("a typed value has one member")
	}
	return t, nil
}

// leanHeaders are the headers parseHeaders reads; leanDeath what it reads
// of x-death's first entry.
var (
	leanHeaders = map[string]bool{"x-death": true, replayHeader: true, "x-delivery-count": true, editHeader: true, purgedHeader: true}
	leanDeath   = map[string]bool{"queue": true, "reason": true, "count": true, "time": true}
)

// leanTables are decodeHeadersLean's tables, emptied and filled again
// row after row: the maps of the top table and of x-death's entry, and
// x-death's list, were three of its eight allocations a row.
type leanTables struct {
	top, death amqp.Table
	deaths     []any
}

// tableOf is table into t (emptied first), keeping only the members named
// in keep; x-death's first entry (a list's first table), as leanDeath
// keeps it.
func (p *typedParser) tableOf(t amqp.Table, keep map[string]bool) (amqp.Table, error) {
	if err := p.expect('{'); err != nil {
		return nil, err
	}
	clear(t)
	if p.peek() == '}' {
		p.i++
		return t, nil
	}
	for {
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		switch {
		case k == "x-death" && keep[k] && p.peek() == '[':
			v, err := p.firstDeath()
			if err != nil {
				return nil, err
			}
			t[k] = v
		case keep[k]:
			v, err := p.value()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			t[k] = v
		default:
			if err := p.skip(); err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
		}
		if more, err := p.more('}'); err != nil {
			return nil, err
		} else if !more {
			return t, nil
		}
	}
}

// firstDeath is x-death's list with its first entry only, of that entry
// the members leanDeath keeps (parseHeaders reads no other).
func (p *typedParser) firstDeath() ([]any, error) {
	p.i++ // [
	l := p.lean.deaths[:0]
	defer func() { p.lean.deaths = l[:0] }()
	for first := true; ; first = false {
		if first && p.peek() == ']' {
			p.i++
			return l, nil
		}
		if first && p.peek() == '{' && bytes.HasPrefix(p.b[p.i+1:], []byte(`"table"`)) {
			p.i++
			if _, err := p.key(); err != nil {
				return nil, err
			}
			v, err := p.tableOf(p.lean.death, leanDeath)
			if err != nil {
				return nil, err
			}
			if err := p.expect('}'); err != nil {
				return nil, err
			}
			l = append(l, v)
		} else if first {
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		} else if err := p.skip(); err != nil {
			return nil, err
		}
		if more, err := p.more(']'); err != nil {
			return nil, err
		} else if !more {
			return l, nil
		}
	}
}

// skip passes over one typed value, making nothing of it that it need
// not: it refuses what value refuses (a scalar is read by member and
// dropped: a number out of its type's range, a time that does not parse),
// and makes no tables, lists or strings.
func (p *typedParser) skip() error {
	switch c := p.peek(); c {
	case '"':
		return p.skipStr()
	case '[':
		p.i++
		if p.peek() == ']' {
			p.i++
			return nil
		}
		for {
			if err := p.skip(); err != nil {
				return err
			}
			if more, err := p.more(']'); err != nil {
				return err
			} else if !more {
				return nil
			}
		}
	case '{':
		p.i++
		k, err := p.key()
		if err != nil {
			return err
		}
		if k == "table" {
			err = p.skipObject()
		} else {
			_, err = p.member(k)
		}
		if err != nil {
			return err
		}
		if p.peek() != '}' {
			return p.errorf("a typed value has one member")
		}
		p.i++
		return nil
	case 't', 'f', 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(p.b[p.i:], []byte(lit)) {
				p.i += len(lit)
				return nil
			}
		}
	}
	return p.errorf("unexpected value")
}

// more passes over what follows a member of a list or an object: true
// after a comma (another member follows), false after close (the end).
func (p *typedParser) more(close byte) (bool, error) {
	switch p.peek() {
	case ',':
		p.i++
		return true, nil
	case close:
		p.i++
		return false, nil
	}
	return false, p.errorf("want , or %c", close)
}

// skipObject passes over a table's members.
func (p *typedParser) skipObject() error {
	if err := p.expect('{'); err != nil {
		return err
	}
	if p.peek() == '}' {
		p.i++
		return nil
	}
	for {
		if p.peek() != '"' {
			return p.errorf("want a member name")
		}
		if err := p.skipStr(); err != nil {
			return err
		}
		if err := p.expect(':'); err != nil {
			return err
		}
		if err := p.skip(); err != nil {
			return err
		}
		if more, err := p.more('}'); err != nil {
			return err
		} else if !more {
			return nil
		}
	}
}

// skipStr passes over a JSON string, refusing what str refuses: an
// escape is checked by encoding/json, as str has it read.
func (p *typedParser) skipStr() error {
	start := p.i
	p.i++ // the quote
	plain := true
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			if !plain && !json.Valid(p.b[start:p.i]) {
				return p.errorf("a string's escape")
			}
			return nil
		case c == '\\':
			plain = false
			p.i += 2
		case c < 0x20:
			return p.errorf("a control character in a string")
		default:
			p.i++
		}
	}
	return p.errorf("a string without its end")
}
