package postgres

import (
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// pgKey is id as PostgreSQL text can hold it, one to one: text must be
// valid UTF-8 without NUL, and an AMQP message_id is any bytes (the
// consumer records an unsendable one under it). Such an id, and any id that
// begins with `\x`, is kept as `\x` and its bytes in hex, as psql shows
// bytea; every other id is itself.
func pgKey(id string) string {
	if utf8.ValidString(id) && !strings.ContainsRune(id, 0) && !strings.HasPrefix(id, `\x`) {
		return id
	}
	return `\x` + hex.EncodeToString([]byte(id))
}

// pgText is s fit for a text column: invalid UTF-8 (a response excerpt cut
// in the middle of a character) and NUL become U+FFFD. It is for what
// people read (errors, sentences, claim ids), never for a key.
func pgText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

func pgNullText(s string) *string {
	if s == "" {
		return nil
	}
	t := pgText(s)
	return &t
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
