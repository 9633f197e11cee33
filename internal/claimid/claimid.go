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
