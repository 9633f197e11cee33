package claimid

import (
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

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
		r, next, lone, err := p.escape(i, decode)
		if err != nil {
			return nil, 0, nil, err
		}
		if bad == nil {
			bad = lone
		}
		i, run = next, next
		if decode && r >= 0 {
			var enc [utf8.UTFMax]byte
			emit(enc[:utf8.EncodeRune(enc[:], r)])
		}
	}
}

// escapes are the one-letter escapes of JSON and what they stand for.
var escapes = [256]rune{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escape decodes the backslash escape at b[i] (b[i+1] exists): the rune it
// stands for, and where the text after it starts. With decode, a \u escape
// of a surrogate without its pair stands for nothing (r is -1), and lone
// says why that makes the string's value inexact.
func (p *parser) escape(i int, decode bool) (r rune, next int, lone, err error) {
	b := p.b
	e := b[i+1]
	if e != 'u' {
		if escapes[e] == 0 {
			return 0, 0, nil, p.fail(i, "invalid escape \\%c", e)
		}
		return escapes[e], i + 2, nil, nil
	}
	u, ok := hex4(b, i+2)
	if !ok {
		return 0, 0, nil, p.fail(i, `invalid \u escape (four hex digits expected)`)
	}
	next = i + 6
	if !decode || !utf16.IsSurrogate(u) {
		return u, next, nil, nil
	}
	// A high surrogate must be followed at once by a low one.
	if u < 0xDC00 {
		if lo, ok := hex4(b, i+8); ok && i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' && lo >= 0xDC00 && lo <= 0xDFFF {
			return utf16.DecodeRune(u, lo), next + 6, nil, nil
		}
	}
	return -1, next, fmt.Errorf(`lone surrogate \u%04x at byte %d of the file (a JSON \u escape of U+D800–U+DFFF must be a high-low pair); it is refused rather than replaced by U+FFFD, which would merge it with other claims`, u, i), nil
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
