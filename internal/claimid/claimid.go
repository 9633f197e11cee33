// Package claimid is the one rule for a claim's identity: which bytes of a
// claim JSON are its guid, and which guids can travel the whole way, as the
// AMQP message_id and then as the partner's Idempotency-Key HTTP header.
//
// A guid is taken byte-exact: the JSON escapes of the "guid" string are
// decoded here, exactly, and nothing is ever normalised. A decoder that
// turns invalid UTF-8 or a lone surrogate (\ud800) into U+FFFD would give
// two different claims the same message_id, and the consumer would then
// acknowledge the second as a duplicate: a claim lost. Such a guid is
// refused instead.
//
// The alphabet a guid may use (Check):
//
//   - 1 to 255 bytes: message_id is an AMQP shortstr;
//   - valid UTF-8, so that every program reads the same characters;
//   - no control character: none of C0 (U+0000–U+001F, TAB included), DEL
//     (U+007F) or C1 (U+0080–U+009F). An HTTP header cannot carry CR, LF
//     or NUL; the rest are dropped, folded or rejected by one HTTP stack
//     or another, and C1's NEL (U+0085) splits lines in some. TAB is legal
//     inside an HTTP header value, but it is refused in a guid: rabbitmqctl
//     and our logs separate fields with it, and no identifier needs one;
//   - no white space at either end, neither SP nor any other Unicode white
//     space (U+00A0, U+2028, ...): HTTP stacks trim SP and TAB, and a
//     partner's strip() or TrimSpace trims the rest.
//
// Everything else, including SP inside and any printable Unicode character,
// travels unchanged.
package claimid

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxLen is the longest guid in bytes: message_id is an AMQP shortstr.
const MaxLen = 255

// maxDepth bounds the nesting of arrays and objects, as encoding/json does,
// so that a hostile body cannot exhaust the stack.
const maxDepth = 10000

// Guid returns the exact value of the top-level object's "guid" member, with
// its JSON escapes decoded and every other byte as it is in body, after
// checking that it can travel (Check).
//
// body must be one well-formed JSON object (RFC 8259; white space around
// it is allowed). The member name must be exactly "guid" once its escapes
// are decoded ("GUID" and "Guid" are other members), and it must appear
// once: a second top-level "guid" is refused, because JSON decoders
// disagree about which one wins. Members of nested objects do not count.
//
// The error says why there is no usable guid: empty body, malformed JSON,
// not an object, no guid, duplicate guid, not a string, invalid UTF-8, a
// lone surrogate escape, or a value outside Check's alphabet.
func Guid(body []byte) (string, error) {
	d, err := scan(body)
	if err != nil {
		return "", err
	}
	return d.guid.value("guid")
}

// Peek returns, best effort, the top-level "guid" and "claimId" of body,
// for a consumer's logs and dedup key. Each is the member's exact value
// under the rules of Guid (exact-case name, present once, a string, valid
// UTF-8, no lone surrogate, passing Check), or "" when body breaks them.
// In particular guid is g exactly when Guid(body) returns g and no error.
//
// Peek never fails and does work linear in len(body), with nesting bounded,
// so it is safe on any bytes: not JSON, truncated, or 16 MiB long.
func Peek(body []byte) (guid, claimID string) {
	d, err := scan(body)
	if err != nil {
		return "", ""
	}
	guid, _ = d.guid.value("guid")
	claimID, _ = d.claimID.value("claimId")
	return guid, claimID
}

// Check reports why s cannot travel as an AMQP message_id and as the value
// of the Idempotency-Key HTTP header, unchanged, or nil when it can. The
// rules are the package's alphabet; HeaderValue's are a part of them.
//
// The error reads after a name and a colon: `"guid": empty`,
// `message_id: control character U+000A at byte 3 ...`.
func Check(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > MaxLen:
		return fmt.Errorf("%d bytes long; message_id is an AMQP shortstr of at most %d bytes", len(s), MaxLen)
	}
	if i := indexInvalidUTF8(s); i >= 0 {
		return fmt.Errorf("not valid UTF-8: byte 0x%02X at byte %d", s[i], i)
	}
	for i, r := range s {
		switch {
		case r == '\t':
			return fmt.Errorf("TAB at byte %d: a guid may not hold one (rabbitmqctl and the logs separate fields with it)", i)
		case isControl(r):
			return fmt.Errorf("control character %U at byte %d: an HTTP header (Idempotency-Key) cannot carry it unchanged", r, i)
		}
	}
	if r, _ := utf8.DecodeRuneInString(s); unicode.IsSpace(r) {
		return fmt.Errorf("begins with white space %U: HTTP stacks and strip() remove it", r)
	}
	if r, _ := utf8.DecodeLastRuneInString(s); unicode.IsSpace(r) {
		return fmt.Errorf("ends with white space %U: HTTP stacks and strip() remove it", r)
	}
	return nil
}

// HeaderValue reports why s is not an HTTP header field value that every
// HTTP stack carries unchanged, or nil. That is RFC 9110's field-value
// (visible characters, with SP and TAB allowed between them) narrowed to
// valid UTF-8 without C1 control characters (U+0080–U+009F), with nothing
// at either end that a parser trims (SP, TAB). The empty string is a valid
// (empty) value.
func HeaderValue(s string) error {
	if i := indexInvalidUTF8(s); i >= 0 {
		return fmt.Errorf("not valid UTF-8: byte 0x%02X at byte %d", s[i], i)
	}
	for i, r := range s {
		if r != '\t' && isControl(r) {
			return fmt.Errorf("control character %U at byte %d: an HTTP header cannot carry it unchanged", r, i)
		}
	}
	if s != "" && (s[0] == ' ' || s[0] == '\t') {
		return errors.New("begins with SP or TAB: HTTP parsers trim it")
	}
	if n := len(s); n > 0 && (s[n-1] == ' ' || s[n-1] == '\t') {
		return errors.New("ends with SP or TAB: HTTP parsers trim it")
	}
	return nil
}

// isControl reports whether r is a C0 control, DEL or a C1 control.
func isControl(r rune) bool {
	return r < 0x20 || (r >= 0x7F && r <= 0x9F)
}

// indexInvalidUTF8 returns the byte offset of the first invalid UTF-8
// sequence in s, or -1. (Go's utf8 refuses encoded surrogates too.)
func indexInvalidUTF8(s string) int {
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

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

// str scans the string that starts at p.i. With decode, it returns the
// string's exact value: escapes decoded, other bytes copied as they are,
// and why that value is not exact text (bad) when it holds invalid UTF-8 or
// a surrogate escape without its pair. Such a value has no faithful string
// form; it is refused, never repaired. The value stops growing past
// MaxLen+utf8.UTFMax bytes, which is already too long for any use here, so
// that a huge string costs no memory.
func (p *parser) str(decode bool) (val []byte, n int, bad error, err error) {
	b := p.b
	start := p.i
	i := p.i + 1
	run := i // start of the current run of raw bytes
	const keep = MaxLen + utf8.UTFMax
	emit := func(s []byte) {
		n += len(s)
		if len(val) < keep {
			val = append(val, s[:min(len(s), keep-len(val))]...)
		}
	}
	flush := func(end int) {
		if !decode || run == end {
			return
		}
		raw := b[run:end]
		if bad == nil {
			if j := indexInvalidUTF8(string(raw)); j >= 0 {
				bad = fmt.Errorf("not valid UTF-8: byte 0x%02X at byte %d of the file; it is refused rather than replaced by U+FFFD, which would merge it with other claims", raw[j], run+j)
			}
		}
		emit(raw)
	}
	for {
		// The common case: plain bytes.
		for i < len(b) && b[i] >= 0x20 && b[i] != '"' && b[i] != '\\' {
			i++
		}
		if i >= len(b) {
			return nil, 0, nil, p.fail(start, "unterminated string")
		}
		switch c := b[i]; {
		case c == '"':
			flush(i)
			p.i = i + 1
			return val, n, bad, nil
		case c < 0x20:
			return nil, 0, nil, p.fail(i, "control character 0x%02X inside a string (it must be escaped)", c)
		}
		// A backslash escape.
		flush(i)
		if i+1 >= len(b) {
			return nil, 0, nil, p.fail(start, "unterminated string")
		}
		var r rune
		switch e := b[i+1]; e {
		case '"', '\\', '/':
			r = rune(e)
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			u, ok := hex4(b, i+2)
			if !ok {
				return nil, 0, nil, p.fail(i, `invalid \u escape (four hex digits expected)`)
			}
			r = u
			if decode && utf16.IsSurrogate(u) {
				if u < 0xDC00 {
					// A high surrogate must be followed at once by a low one.
					if lo, ok := hex4(b, i+8); ok && i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' && lo >= 0xDC00 && lo <= 0xDFFF {
						r = utf16.DecodeRune(u, lo)
						i += 6
					} else {
						r = -1
					}
				} else {
					r = -1
				}
				if r < 0 && bad == nil {
					bad = fmt.Errorf(`lone surrogate \u%04x at byte %d of the file (a JSON \u escape of U+D800–U+DFFF must be a high-low pair); it is refused rather than replaced by U+FFFD, which would merge it with other claims`, u, i)
				}
			}
			i += 4
		default:
			return nil, 0, nil, p.fail(i, "invalid escape \\%c", e)
		}
		i += 2
		run = i
		if decode && r >= 0 {
			var enc [utf8.UTFMax]byte
			emit(enc[:utf8.EncodeRune(enc[:], r)])
		}
	}
}

// hex4 decodes the four hex digits at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}
