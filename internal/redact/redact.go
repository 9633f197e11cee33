// Package redact is the one rule for showing an address that may hold a
// password: an AMQP URL (or a list of them), an http(s) URL, a PostgreSQL
// URL. Every message and log line of every program shows addresses through
// it, so that no path prints a password in any spelling.
package redact

import (
	"net/url"
	"strings"
)

// Hidden stands in for a password, or for a part of an address that may
// hold one.
const Hidden = "xxxxx"

// URL returns raw (an address, a comma-separated list of addresses, or
// anything a user typed in their place) fit for any message or log line:
// the password of each address's userinfo is hidden, and so is the value
// of any query parameter whose name holds "password" (PostgreSQL's
// ?password=).
//
// An address that parses cleanly keeps everything but its password
// ("amqp://guest:xxxxx@host:5672/vh"). Anything else is taken apart without
// a parser, because a parser that fails is exactly when a password with a
// stray "%", "/" or "@" would otherwise be echoed: everything between "://"
// and the last "@" is userinfo, and only its user name survives. An "@"
// after the host counts too (an unencoded "/" in a password moves the real
// host behind it), so when in doubt more is hidden, never less. An
// unparsable address without userinfo whose host:port part is not one
// (say "guest:S3cret" with the host forgotten) is hidden whole.
//
// A comma starts a new address only where what follows it begins with a
// scheme ("amqp://a,amqp://b"): a comma inside one address (a password, or
// the host list of a PostgreSQL URL) does not split it.
func URL(raw string) string {
	addrs := split(raw)
	for i, a := range addrs {
		addrs[i] = one(a)
	}
	return strings.Join(addrs, ",")
}

// split cuts raw at each comma that a scheme follows.
func split(raw string) []string {
	var out []string
	start := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] == ',' && startsWithScheme(strings.TrimLeft(raw[i+1:], " \t")) {
			out = append(out, raw[start:i])
			start = i + 1
		}
	}
	return append(out, raw[start:])
}

// startsWithScheme reports whether s begins with letters and "://".
func startsWithScheme(s string) bool {
	i := strings.Index(s, "://")
	if i <= 0 {
		return false
	}
	for _, r := range s[:i] {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '+' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func one(raw string) string {
	if u, ok := cleanURL(raw); ok {
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), Hidden)
			}
		}
		hideQuery(u)
		return u.String()
	}
	prefix, rest := splitScheme(raw)
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		user, _, hasPass := strings.Cut(rest[:at], ":")
		after := hideQueryText(rest[at+1:])
		if !safeName(user) {
			return prefix + Hidden + "@" + after
		}
		if hasPass {
			return prefix + user + ":" + Hidden + "@" + after
		}
		return prefix + user + "@" + after
	}
	auth, tail := splitAuthority(rest)
	if i := strings.LastIndex(auth, ":"); i >= 0 && !allDigits(auth[i+1:]) {
		return prefix + Hidden + hideQueryText(tail)
	}
	return prefix + auth + hideQueryText(tail)
}

// passwordKey reports whether a query parameter's name says it holds a
// password.
func passwordKey(k string) bool { return strings.Contains(strings.ToLower(k), "password") }

// hideQuery hides the values of u's password parameters.
func hideQuery(u *url.URL) {
	if u.RawQuery == "" {
		return
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		u.RawQuery = hideQueryText("?" + u.RawQuery)[1:]
		return
	}
	changed := false
	for k := range q {
		if passwordKey(k) {
			q.Set(k, Hidden)
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
}

// hideQueryText hides, without a parser, the value of every parameter of
// s's query (after its first "?") whose name holds "password".
func hideQueryText(s string) string {
	i := strings.IndexByte(s, '?')
	if i < 0 {
		return s
	}
	params := strings.Split(s[i+1:], "&")
	for j, p := range params {
		if k, _, ok := strings.Cut(p, "="); ok && passwordKey(k) {
			params[j] = k + "=" + Hidden
		} else if passwordKey(p) {
			params[j] = Hidden
		}
	}
	return s[:i+1] + strings.Join(params, "&")
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

// secrets returns the strings of raw that must never be printed: each
// address's password as written, percent-decoded, and as the parser sees
// it, the whole userinfo, and password parameters' values. Very short ones
// are left out: hiding every "a" in a message would make it unreadable, and
// nothing here prints a password on purpose; this is the second line of
// defence.
func secrets(raw string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 {
			out = append(out, s)
		}
	}
	for _, a := range split(raw) {
		_, rest := splitScheme(a)
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
		if u, err := url.Parse(a); err == nil {
			if u.User != nil {
				if p, ok := u.User.Password(); ok {
					add(p)
				}
			}
			for k, vs := range u.Query() {
				if passwordKey(k) {
					for _, v := range vs {
						add(v)
					}
				}
			}
		}
	}
	return out
}

// Scrub returns msg (an error's text, say) with raw replaced by URL(raw)
// and any of raw's secrets hidden.
func Scrub(msg, raw string) string {
	if raw == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, raw, URL(raw))
	for _, s := range secrets(raw) {
		msg = strings.ReplaceAll(msg, s, Hidden)
	}
	return msg
}

// Remove returns msg with each of locations hidden whole (as written, and
// as URL shows it), and their secrets with them: for a page read by people
// who must learn neither the store's path nor the broker's address.
func Remove(msg string, locations ...string) string {
	for _, l := range locations {
		for _, a := range split(l) {
			msg = Scrub(msg, a)
			if r := URL(a); len(r) > 1 {
				msg = strings.ReplaceAll(msg, r, Hidden)
			}
		}
		if len(l) > 1 {
			msg = strings.ReplaceAll(msg, l, Hidden)
		}
	}
	return msg
}
