package deadletter

import (
	"bytes"
	"slices"
)

// Text in the body (-text): both backends narrow a search by an index of
// the words of each row's body, and HasText decides, for them and for
// claim.dead alike, so that every source gives the same answers.
//
// A word is what SQLite's FTS4 "simple" tokenizer takes for one: a run of
// ASCII letters and digits and of bytes of 0x80 and over (the letters of
// other scripts, whole), ASCII letters lower-cased. SQLite keeps them in
// an FTS4 table (mattn/go-sqlite3 builds FTS3/4 by default; FTS5 needs a
// build tag every build of the project would need); PostgreSQL in an
// array column with a GIN index (pg_trgm is an extension the store's role
// may not be allowed to create). Rows of words (a table of word, seq)
// cost ingestion several times its rate, an index entry a word.

// MaxWords bounds the words PostgreSQL keeps of one body: a body with
// more keeps the first MaxWords and the word AllWords, which every search
// selects, so that HasText decides for it.
const MaxWords = 1000

// AllWords stands for the words a body had beyond MaxWords. No word holds
// it.
const AllWords = "*"

// MaxWordBytes bounds a word in PostgreSQL's index (a GIN entry has a
// size limit): a longer one is kept cut, and a search for it cut alike.
const MaxWordBytes = 64

func wordByte(c byte) bool {
	return c >= 0x80 || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// words are the distinct words of b, in order of appearance, at most max
// (0: all). A word seen already costs no allocation (the map is looked
// up by the bytes, lower-cased into one buffer): ingestion finds the
// words of every dead letter, and a string and a lower-cased copy for
// each occurrence were a fifth of SQLite's share of it.
func words(b []byte, max int) []string {
	var seen map[string]bool
	var out []string
	var lower []byte
	eachWord(b, &lower, func(w []byte) bool {
		if !seen[string(w)] {
			if seen == nil {
				seen = map[string]bool{}
			}
			s := string(w)
			seen[s] = true
			out = append(out, s)
		}
		return max <= 0 || len(out) < max
	})
	return out
}

// eachWord calls fn with each word of b in order, lower-cased (into
// *lower when it had an upper-case letter: fn copies what it keeps),
// until fn returns false.
func eachWord(b []byte, lower *[]byte, fn func(w []byte) bool) {
	for i := 0; i < len(b); {
		if !wordByte(b[i]) {
			i++
			continue
		}
		j := i
		for j < len(b) && wordByte(b[j]) {
			j++
		}
		w := b[i:j]
		i = j
		if hasUpper(w) {
			*lower = appendLower((*lower)[:0], w)
			w = *lower
		}
		if !fn(w) {
			return
		}
	}
}

func hasUpper(b []byte) bool {
	for _, c := range b {
		if 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}

// Words are the words of body as PostgreSQL's index keeps them: each cut
// to MaxWordBytes (IndexWord), at most MaxWords of them, then AllWords.
func Words(body []byte) []string {
	ws := words(body, 0)
	for i, w := range ws {
		ws[i] = IndexWord(w)
	}
	ws = slices.Compact(ws) // a cut word may be another's cut
	if len(ws) > MaxWords {
		ws = append(ws[:MaxWords], AllWords)
	}
	return ws
}

// IndexWord is w as PostgreSQL's index keeps it: at most MaxWordBytes.
func IndexWord(w string) string {
	if len(w) > MaxWordBytes {
		return w[:MaxWordBytes]
	}
	return w
}

// TextWords are the words of a search's text, as a body's are read.
func TextWords(text string) []string { return words([]byte(text), 0) }

// HasText says whether body holds text: text's bytes, ASCII letter case
// aside, and each of its words a word of the body. This decides; the
// backends' indexes only narrow (a body that holds text has each of its
// words). One rule for the rows of both backends and for claim.dead.
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
func asciiLower(b []byte) []byte { return appendLower(make([]byte, 0, len(b)), b) }

// appendLower appends b to dst with its ASCII letters lower-cased.
func appendLower(dst, b []byte) []byte {
	for _, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// Joiner makes a body's words joined by spaces, as SQLite's word index
// is given them (TextWords of the body, in their order), keeping its map
// and buffers from one body to the next: dlq ingest does it for every
// dead letter, and the slice of strings and its join cost a twentieth of
// its CPU (pprof of dlq ingest over 100,000, issue 29). A Joiner is for
// one goroutine.
type Joiner struct {
	seen  map[string]bool
	lower []byte
	out   []byte
}

// Join is the words of body joined by spaces, in a buffer that the next
// Join overwrites: the caller copies what it keeps.
func (j *Joiner) Join(body []byte) []byte {
	if j.seen == nil {
		j.seen = map[string]bool{}
	}
	clear(j.seen)
	j.out = j.out[:0]
	eachWord(body, &j.lower, func(w []byte) bool {
		if !j.seen[string(w)] {
			j.seen[string(w)] = true
			if len(j.out) > 0 {
				j.out = append(j.out, ' ')
			}
			j.out = append(j.out, w...)
		}
		return true
	})
	return j.out
}
