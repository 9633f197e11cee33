package dlqweb

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Token is one token the page accepts, and the name the audit trail gives
// whoever sends it.
type Token struct {
	Name, Value string
}

// SharedName is the name of EAIMQ_DLQ_TOKEN's token in the audit trail:
// a token several people share names none of them.
const SharedName = EnvToken

// MinToken is the shortest token accepted: shorter is too easy to guess.
const MinToken = 16

// tokenName is what a name in EAIMQ_DLQ_TOKENS may be: a login, a mail
// address, initials.
var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$`)

// Tokens reads the tokens the page accepts: single (EAIMQ_DLQ_TOKEN, named
// SharedName) and the file named by file (EAIMQ_DLQ_TOKENS): one "name
// token" a line, blank lines and lines starting with # ignored. The file
// holds secrets, so it must be readable by its owner only. A name or a
// token given twice is refused: the trail would not know whom to name.
func Tokens(single, file string) ([]Token, error) {
	var out []Token
	if single != "" {
		out = append(out, Token{Name: SharedName, Value: single})
	}
	if file != "" {
		ts, err := readTokens(file)
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	names, values := map[string]bool{}, map[string]string{}
	for _, t := range out {
		if err := checkToken(t); err != nil {
			return nil, err
		}
		if names[t.Name] {
			return nil, fmt.Errorf("%s names %s twice", EnvTokens, t.Name)
		}
		if other, ok := values[t.Value]; ok {
			return nil, fmt.Errorf("%s and %s have the same token: give each its own", other, t.Name)
		}
		names[t.Name], values[t.Value] = true, t.Name
	}
	return out, nil
}

func readTokens(path string) ([]Token, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", EnvTokens, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s %s can be read by others (mode %04o): it holds the tokens; chmod 600 %s", EnvTokens, path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", EnvTokens, err)
	}
	var out []Token
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 || !tokenName.MatchString(f[0]) {
			// The line is not shown: it may hold a token.
			return nil, fmt.Errorf("%s %s, line %d: want \"name token\" (a name of letters, digits and ._@+-, then the token)", EnvTokens, path, n)
		}
		out = append(out, Token{Name: f[0], Value: f[1]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s %s: %v", EnvTokens, path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s %s holds no token", EnvTokens, path)
	}
	return out, nil
}

func checkToken(t Token) error {
	if len(t.Value) >= MinToken {
		return nil
	}
	if t.Name == SharedName {
		return fmt.Errorf("%s is shorter than %d characters: too easy to guess", EnvToken, MinToken)
	}
	return fmt.Errorf("%s: the token of %s is shorter than %d characters: too easy to guess", EnvTokens, t.Name, MinToken)
}
