package claimid

import (
	"errors"
	"fmt"
)

// member is what the scan found of one top-level member of interest.
type member struct {
	count int    // times the name appeared at the top level
	kind  string // kind of its (first) value: "a string", "a number", ...
	val   []byte // exact decoded value, when kind is a string (cut short past MaxLen)
	n     int    // length of the whole decoded value
	bad   error  // why the string value is not exact text (invalid UTF-8, lone surrogate)
	raw   []byte // the string's bytes between the quotes, as in the body
}

func (m *member) value(name string) (string, error) {
	switch {
	case m.count == 0:
		if name == "guid" {
			return "", errors.New(`no "guid" member (it becomes the message_id)`)
		}
		return "", fmt.Errorf("no %q member", name)
	case m.count > 1:
		return "", fmt.Errorf("%q: appears %d times at the top level; JSON decoders disagree about which one counts", name, m.count)
	case m.kind != "a string":
		return "", fmt.Errorf("%q: %s, not a string", name, m.kind)
	case m.bad != nil:
		return "", fmt.Errorf("%q: %w", name, m.bad)
	case m.n > MaxLen:
		return "", fmt.Errorf("%q: %d bytes long; message_id is an AMQP shortstr of at most %d bytes", name, m.n, MaxLen)
	}
	s := string(m.val)
	if err := Check(s); err != nil {
		return "", fmt.Errorf("%q: %w", name, err)
	}
	return s, nil
}

// doc is what the scan keeps of a body.
type doc struct {
	guid, claimID member
}

// scan checks that body is one well-formed JSON object and collects its
// top-level "guid" and "claimId" members.
func scan(body []byte) (doc, error) {
	p := parser{b: body}
	var d doc
	p.ws()
	if p.i == len(p.b) {
		return d, errors.New("empty: not a JSON object")
	}
	if c := p.b[p.i]; c != '{' {
		if err := p.value(0); err != nil {
			return d, err
		}
		if err := p.end(); err != nil {
			return d, err
		}
		return d, fmt.Errorf("JSON is %s, not an object", kindOf(c))
	}
	if err := p.object(1, &d); err != nil {
		return d, err
	}
	return d, p.end()
}

// parser is a strict RFC 8259 scanner. It decodes only the strings it is
// asked for; others are checked for syntax and skipped, their bytes left
// alone (the partner judges the rest of the claim).
type parser struct {
	b []byte
	i int
}

type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("malformed JSON at byte %d: %s", e.off, e.msg)
}

func (p *parser) fail(off int, format string, a ...any) error {
	return &syntaxError{off: off, msg: fmt.Sprintf(format, a...)}
}

func (p *parser) unexpected() error {
	if p.i >= len(p.b) {
		return p.fail(p.i, "unexpected end of input")
	}
	c := p.b[p.i]
	if c >= 0x20 && c < 0x7F {
		return p.fail(p.i, "unexpected %q", c)
	}
	return p.fail(p.i, "unexpected byte 0x%02X", c)
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// end checks that nothing but white space follows the top-level value.
func (p *parser) end() error {
	p.ws()
	if p.i == len(p.b) {
		return nil
	}
	if kindOf(p.b[p.i]) != "" {
		return p.fail(p.i, "more than one value (one claim per file)")
	}
	return p.fail(p.i, "trailing data after the value")
}

// kindOf names the kind of JSON value that starts with c, or "".
func kindOf(c byte) string {
	switch {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't', c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-', c >= '0' && c <= '9':
		return "a number"
	}
	return ""
}

func (p *parser) value(depth int) error {
	p.ws()
	if p.i >= len(p.b) {
		return p.unexpected()
	}
	switch c := p.b[p.i]; c {
	case '{':
		return p.object(depth+1, nil)
	case '[':
		return p.array(depth + 1)
	case '"':
		_, _, _, err := p.str(false)
		return err
	case 't':
		return p.literal("true")
	case 'f':
		return p.literal("false")
	case 'n':
		return p.literal("null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return p.number()
		}
	}
	return p.unexpected()
}

func (p *parser) literal(lit string) error {
	if len(p.b)-p.i >= len(lit) && string(p.b[p.i:p.i+len(lit)]) == lit {
		p.i += len(lit)
		return nil
	}
	return p.fail(p.i, "invalid literal (true, false or null expected)")
}

func (p *parser) number() error {
	start := p.i
	digits := func() bool {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n > 0
	}
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case !digits():
		return p.fail(start, "invalid number")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if !digits() {
			return p.fail(start, "invalid number")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if !digits() {
			return p.fail(start, "invalid number")
		}
	}
	return nil
}

func (p *parser) array(depth int) error {
	if depth > maxDepth {
		return p.fail(p.i, "nested deeper than %d", maxDepth)
	}
	p.i++ // [
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return nil
	}
	for {
		if err := p.value(depth); err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.b) {
			return p.unexpected()
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return nil
		default:
			return p.unexpected()
		}
	}
}

// object scans an object; when d is not nil it is the top level, and its
// "guid" and "claimId" members are collected into d.
func (p *parser) object(depth int, d *doc) error {
	if depth > maxDepth {
		return p.fail(p.i, "nested deeper than %d", maxDepth)
	}
	p.i++ // {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return nil
	}
	for {
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			if p.i < len(p.b) {
				return p.fail(p.i, "member name (a string) expected")
			}
			return p.unexpected()
		}
		name, _, bad, err := p.str(d != nil)
		if err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			if p.i < len(p.b) {
				return p.fail(p.i, "':' expected after a member name")
			}
			return p.unexpected()
		}
		p.i++
		p.ws()
		var m *member
		if d != nil && bad == nil {
			// A member name is compared after decoding, so "gu\u0069d"
			// is "guid", as it is to every JSON decoder. A name that is
			// not exact text is no name of ours.
			switch string(name) {
			case "guid":
				m = &d.guid
			case "claimId":
				m = &d.claimID
			}
		}
		if m != nil && p.i < len(p.b) {
			m.count++
			if m.count == 1 {
				m.kind = kindOf(p.b[p.i])
			}
			if m.count == 1 && p.b[p.i] == '"' {
				start := p.i + 1
				m.val, m.n, m.bad, err = p.str(true)
				if err != nil {
					return err
				}
				m.raw = p.b[start : p.i-1]
			} else if err := p.value(depth); err != nil {
				return err
			}
		} else if err := p.value(depth); err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.b) {
			return p.unexpected()
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return p.fail(p.i, "',' or '}' expected after a member")
		}
	}
}
