package deadletter

import (
	"bytes"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text in the body: both backends keep the words of each row's body in a
// table of their own (dead_letter_words: word, seq), so that -text is
// served by an index on SQLite and PostgreSQL alike, with one reading of
// what a word is (here), and the same answers from both. Neither
// PostgreSQL's pg_trgm (an extension the store's role may not be allowed
// to create) nor SQLite's FTS5 (a build tag of mattn/go-sqlite3 every
// build of the project would need) is that.

// MaxWords bounds the words kept of one body. A body with more keeps the
// first MaxWords and the word AllWords, which every search selects, so
// that HasText decides for it: a 1 MiB claim does not write a hundred
// thousand index rows.
const MaxWords = 1000

// AllWords stands for the words a body had beyond MaxWords. Words never
// hold it (it is not a letter or digit).
const AllWords = "*"

// maxWordBytes bounds one word: a longer run of letters is kept cut, and
// a search for it cut alike.
const maxWordBytes = 64

// Words are the distinct words of body, in order of appearance: runs of
// letters and digits (Unicode), lower-cased, at most maxWordBytes each,
// and at most MaxWords of them (then AllWords too).
func Words(body []byte) []string {
	ws := words(body, MaxWords+1)
	if len(ws) > MaxWords {
		ws = append(ws[:MaxWords], AllWords)
	}
	return ws
}

func words(body []byte, max int) []string {
	seen := map[string]bool{}
	var out []string
	var w strings.Builder
	end := func() {
		if w.Len() == 0 {
			return
		}
		s := w.String()
		if len(s) > maxWordBytes {
			s = strings.ToValidUTF8(s[:maxWordBytes], "")
		}
		w.Reset()
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for len(body) > 0 && (max <= 0 || len(out) < max) {
		r, n := utf8.DecodeRune(body)
		body = body[n:]
		if r != utf8.RuneError && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			w.WriteRune(unicode.ToLower(r))
			continue
		}
		end()
	}
	if max <= 0 || len(out) < max {
		end()
	}
	return out
}

// TextWords are the words of a search's text, as Words reads a body's.
func TextWords(text string) []string { return words([]byte(text), 0) }

// HasText says whether body holds text: text's bytes, ASCII letter case
// aside, and each of its words a word of the body. This decides; the
// words table only narrows (a body that holds text has each of its words,
// or AllWords). One rule for the rows of both backends and for claim.dead.
func HasText(body []byte, text string) bool {
	if text == "" {
		return true
	}
	if !bytes.Contains(asciiLower(body), asciiLower([]byte(text))) {
		return false
	}
	have := words(body, 0)
	for _, w := range TextWords(text) {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// asciiLower is b with its ASCII letters lower-cased, and nothing else
// changed (bytes.ToLower would rewrite other letters' UTF-8, and invalid
// UTF-8 too).
func asciiLower(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}
