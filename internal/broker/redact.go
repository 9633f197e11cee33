package broker

import (
	"net/url"
	"strings"
)

// hidden stands in for a password, or for a part of a URL that may hold one.
const hidden = "xxxxx"

// Redact returns the AMQP address raw fit for any message or log line: the
// password of its userinfo is replaced. It is RedactURL for each address of
// a list (see Addresses).
func Redact(raw string) string {
	addrs := Addresses(raw)
	for i, a := range addrs {
		addrs[i] = RedactURL(a)
	}
	return strings.Join(addrs, ",")
}

// RedactURL returns raw (an amqp://, amqps://, http:// or https:// URL, or
// anything a user typed in its place) with the password hidden, so that it
// can go into any message or log line.
//
// A URL that parses cleanly keeps everything but its password
// ("amqp://guest:xxxxx@host:5672/vh"). Anything else is taken apart without
// a parser, because a parser that fails is exactly when a password with a
// stray "%", "/" or "@" would otherwise be echoed: everything between "://"
// and the last "@" is userinfo, and only its user name survives. An "@"
// after the host counts too (an unencoded "/" in a password moves the real
// host behind it), so when in doubt more is hidden, never less. An
// unparsable address without userinfo whose host:port part is not one
// (say "guest:S3cret" with the host forgotten) is hidden whole.
func RedactURL(raw string) string {
	if u, ok := cleanURL(raw); ok {
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), hidden)
			}
		}
		return u.String()
	}
	prefix, rest := splitScheme(raw)
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		user, _, hasPass := strings.Cut(rest[:at], ":")
		if !safeName(user) {
			return prefix + hidden + "@" + rest[at+1:]
		}
		if hasPass {
			return prefix + user + ":" + hidden + "@" + rest[at+1:]
		}
		return prefix + user + "@" + rest[at+1:]
	}
	auth, tail := splitAuthority(rest)
	if i := strings.LastIndex(auth, ":"); i >= 0 && !allDigits(auth[i+1:]) {
		return prefix + hidden + tail
	}
	return prefix + rest
}

// cleanURL parses raw when it is an ordinary hierarchical URL whose only
// "@" (if any) ends its userinfo; ok is false for anything else.
func cleanURL(raw string) (*url.URL, bool) {
	if !strings.Contains(raw, "://") {
		return nil, false
	}
	_, rest := splitScheme(raw)
	if _, tail := splitAuthority(rest); strings.Contains(tail, "@") {
		return nil, false
	}
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return nil, false
	}
	return u, true
}

// splitScheme splits raw after "://"; prefix is empty when there is none.
func splitScheme(raw string) (prefix, rest string) {
	if i := strings.Index(raw, "://"); i >= 0 {
		return raw[:i+3], raw[i+3:]
	}
	return "", raw
}

// splitAuthority splits what follows "://" at the first "/", "?" or "#".
func splitAuthority(rest string) (auth, tail string) {
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		return rest[:i], rest[i:]
	}
	return rest, ""
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// safeName reports whether a user name taken from an unparsable URL is
// plainly a name (letters, digits, "._-") and so fit to show.
func safeName(s string) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}

// secrets returns the strings of raw that must never be printed: its
// password as written, percent-decoded, and as the parser sees it, and the
// whole userinfo. Very short ones are left out: hiding every "a" in a
// message would make it unreadable, and nothing here prints a password on
// purpose; this is the second line of defence.
func secrets(raw string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 {
			out = append(out, s)
		}
	}
	_, rest := splitScheme(raw)
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo := rest[:at]
		if _, pass, ok := strings.Cut(userinfo, ":"); ok {
			add(pass)
			if d, err := url.PathUnescape(pass); err == nil {
				add(d)
			}
			if d, err := url.QueryUnescape(pass); err == nil {
				add(d)
			}
			add(userinfo)
		}
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			add(p)
		}
	}
	return out
}

// scrub returns msg with raw replaced by its redacted form and any of raw's
// secrets hidden.
func scrub(msg, raw string) string {
	if raw == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, raw, RedactURL(raw))
	for _, s := range secrets(raw) {
		msg = strings.ReplaceAll(msg, s, hidden)
	}
	return msg
}
