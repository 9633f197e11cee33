package cli

import (
	"cmp"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Help is what -h prints: the front of the manual, for a person in a
// terminal. The whole manual runs to hundreds of lines, and a terminal
// shows its end (the exit codes) with the flags scrolled far off the
// top. So -h gives the manual's first paragraph, its Usage and Flags
// blocks as doc.go writes them, the names of the environment variables
// and the exit codes, and how to read the rest (-h full). Every line
// comes from doc (nothing is written twice, so nothing can drift); a doc
// without a Usage or a Flags block is printed whole.
func Help(doc, program string) string {
	lines := strings.Split(Manual(doc), "\n")
	usage := section(lines, func(h string) bool { return h == "Usage:" })
	flags := section(lines, func(h string) bool { return strings.HasPrefix(h, "Flags") && strings.HasSuffix(h, ":") })
	if usage == nil || flags == nil {
		return Manual(doc)
	}
	var b strings.Builder
	for _, l := range lines {
		if l == "" {
			break
		}
		b.WriteString(l + "\n")
	}
	for _, s := range [][]string{usage, flags} {
		b.WriteString("\n" + strings.Join(s, "\n") + "\n")
	}
	b.WriteString("\n")
	if env := section(lines, func(h string) bool { return h == "Environment:" }); env != nil {
		var names []string
		for _, l := range env[2:] {
			names = append(names, envNames(l)...)
		}
		b.WriteString(wrap("Environment: "+strings.Join(names, ", "), 76, "  "))
	}
	if exit := section(lines, func(h string) bool { return strings.HasPrefix(h, "Exit status") && strings.HasSuffix(h, ":") }); exit != nil {
		var codes []string
		for _, l := range exit[2:] {
			if m := exitLine.FindStringSubmatch(l); m != nil {
				codes = append(codes, m[1])
			}
		}
		// In numeric order: a manual may list them in another (publish's
		// is the order in which they apply).
		slices.SortFunc(codes, func(a, b string) int {
			x, _ := strconv.Atoi(a)
			y, _ := strconv.Atoi(b)
			return cmp.Compare(x, y)
		})
		b.WriteString(wrap("Exit status: "+strings.Join(codes, ", "), 76, "  "))
	}
	b.WriteString("\n" + wrap(fmt.Sprintf("That is the front of the manual. '%s -h full | less' reads all of it: what the program does and why, and what each exit status means.", program), 76, ""))
	return b.String()
}

// exitLine is a row of an Exit status block: a tab, the code, spaces.
var exitLine = regexp.MustCompile(`^\t(\d+)\s`)

// envName is a variable's name in an Environment block.
var envName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// envNames are the names a row of an Environment block starts with: a
// tab and a name ("\tEAI_MQ_DB  dedup store"), or names joined by commas
// ("\tVISUAL, EDITOR edit: ..."); a row that goes on the one before (a
// tab, then spaces) names none.
func envNames(line string) []string {
	if !strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "\t ") {
		return nil
	}
	var names []string
	for _, f := range strings.Fields(line) {
		name, more := strings.CutSuffix(f, ",")
		if !envName.MatchString(name) {
			break
		}
		names = append(names, name)
		if !more {
			break
		}
	}
	return names
}

// section is the first heading that is accepts, and the block under it,
// as a Go doc comment writes one: the heading, a blank line, then lines
// indented with a tab (blank lines among them kept). Nil when there is
// none.
func section(lines []string, is func(heading string) bool) []string {
	for i, l := range lines {
		if !is(l) || i+2 >= len(lines) || lines[i+1] != "" || !strings.HasPrefix(lines[i+2], "\t") {
			continue
		}
		end := i + 2
		for end < len(lines) && (strings.HasPrefix(lines[end], "\t") ||
			lines[end] == "" && end+1 < len(lines) && strings.HasPrefix(lines[end+1], "\t")) {
			end++
		}
		return lines[i:end]
	}
	return nil
}

// wrap breaks s at spaces into lines of at most width characters, the
// lines after the first indented by indent.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(s) {
		switch {
		case i == 0:
		case n+1+utf8.RuneCountInString(w) > width:
			b.WriteString("\n" + indent)
			n = len(indent)
		default:
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += utf8.RuneCountInString(w)
	}
	return b.String() + "\n"
}

// Suggest is the line that follows an unknown flag, when fs has one a
// typing slip away ("did you mean --max-seconds?"), written with the
// dashes the person typed; "" for any other error, or when no flag is
// near. Near is an edit distance (a letter added, dropped, changed, or
// two swapped) of 1, or 2 for a name of five letters or more: close
// enough to be a slip, far enough that a short name does not match
// everything.
func Suggest(fs *flag.FlagSet, args []string, err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	limit := 1
	if len(name) >= 5 {
		limit = 2
	}
	best, bestD := "", limit+1
	fs.VisitAll(func(f *flag.Flag) { // in lexical order: ties go to the first
		if d := distance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		return ""
	}
	dashes := "-"
	for _, a := range args {
		if a == "--" {
			break
		}
		if n, _, _ := strings.Cut(a, "="); n == "--"+name {
			dashes = "--"
			break
		} else if n == "-"+name {
			break
		}
	}
	return fmt.Sprintf("did you mean %s%s?", dashes, best)
}

// distance is the optimal string alignment distance between a and b:
// the insertions, deletions, substitutions and swaps of two neighbours
// that turn one into the other (flag names are ASCII: bytes will do).
func distance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
