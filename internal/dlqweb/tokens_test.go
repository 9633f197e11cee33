package dlqweb

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// TestTokens: the file of named tokens is read as documented, and refused
// with a line that names the fix (and never shows a token) when it is not.
func TestTokens(t *testing.T) {
	dir := t.TempDir()
	n := 0
	file := func(mode os.FileMode, text string) string {
		n++
		p := filepath.Join(dir, fmt.Sprintf("tokens-%d", n))
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	good := file(0o600, "# the team\nalice  alice-0123456789abcdef\n\n\tbob bob-0123456789abcdef-x  \n")
	ts, err := Tokens("shared-0123456789abcdef", good)
	if err != nil || len(ts) != 3 || ts[0] != (Token{SharedName, "shared-0123456789abcdef"}) || ts[1].Name != "alice" || ts[2].Value != "bob-0123456789abcdef-x" {
		t.Fatalf("Tokens: %+v %v", ts, err)
	}
	for _, c := range []struct {
		path, want string
	}{
		{file(0o644, "alice alice-0123456789abcdef\n"), "can be read by others (mode 0644): it holds the tokens; chmod 600"},
		{file(0o600, "alice alice-0123456789abcdef extra\n"), `line 1: want "name token"`},
		{file(0o600, "al/ice alice-0123456789abcdef\n"), `line 1: want "name token"`},
		{file(0o600, "alice short\n"), "the token of alice is shorter than 16 characters"},
		{file(0o600, "# none\n\n"), "holds no token"},
		{file(0o600, "alice alice-0123456789abcdef\nalice other-0123456789abcdef\n"), "names alice twice"},
		{file(0o600, "alice same-0123456789abcdef\nbob same-0123456789abcdef\n"), "alice and bob have the same token"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		_, err := Tokens("", c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("%s: %v, want %q (and no token)", filepath.Base(c.path), err, c.want)
		}
	}
	if _, err := Tokens("shared-0123456789abcdef", file(0o600, "alice shared-0123456789abcdef\n")); err == nil || !strings.Contains(err.Error(), "same token") {
		t.Errorf("a named token equal to EAIMQ_DLQ_TOKEN: %v", err)
	}
}

// stub is a Backend that notes who acted; it holds no dead letter. The
// page's reads and actions against the real broker are internal/dlq's and
// internal/e2e's tests; this one is about who the page says acted.
type stub struct {
	mu  sync.Mutex
	who []string
}

func (s *stub) Overview(context.Context, bool) (Overview, error) { return Overview{}, nil }
func (s *stub) Group(context.Context, string, int) (List, error) { return List{}, nil }
func (s *stub) Search(context.Context, string, int) (List, error) {
	return List{}, nil
}
func (s *stub) Claim(context.Context, string) (Claim, bool, error) { return Claim{}, false, nil }
func (s *stub) Retry(_ context.Context, who string, _ Target) (Report, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.who = append(s.who, who)
	return Report{Action: "retry"}, nil
}
func (s *stub) Purge(ctx context.Context, who string, t Target) (Report, error) {
	return s.Retry(ctx, who, t)
}
func (s *stub) Archive(context.Context, int) (List, error) { return List{Archive: true}, nil }
func (s *stub) Restore(ctx context.Context, who string, t Target) (Report, error) {
	return s.Retry(ctx, who, t)
}
func (s *stub) CheckEdit(string, []byte) error { return nil }
func (s *stub) EditRetry(ctx context.Context, who, _ string, _ []byte, _ string) (Report, error) {
	return s.Retry(ctx, who, Target{})
}
func (s *stub) Health(context.Context) Health { return Health{OK: true, Depth: 7, Store: "ok"} }
func (s *stub) OverRows(context.Context) bool { return false }

// TestNamedTokens: each named token signs its holder in (bearer or the
// login form's cookie), the backend is told the name; a wrong token is
// refused and logged without its value; /healthz needs none.
func TestNamedTokens(t *testing.T) {
	be := &stub{}
	var log bytes.Buffer
	var logMu sync.Mutex
	h, err := New(Config{Addr: "0.0.0.0:0", Backend: be, Log: writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return log.Write(p)
	}), Tokens: []Token{{"alice", "alice-0123456789abcdef"}, {"bob", "bob-0123456789abcdef"}}, Banner: Banner{Broker: "amqp://mq:5672", VHost: "v", Queue: "claim.dead"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, form url.Values, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		var body *strings.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		} else {
			body = strings.NewReader("")
		}
		req, _ := http.NewRequest(method, srv.URL+path, body)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp, b.String()
	}
	resp, page := do("GET", "/", nil, map[string]string{"Authorization": "Bearer bob-0123456789abcdef"})
	if resp.StatusCode != 200 || !strings.Contains(page, "signed in as bob") || !strings.Contains(page, "queue claim.dead · vhost v · broker amqp://mq:5672") {
		t.Fatalf("bob's bearer token: %d\n%s", resp.StatusCode, page)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)
	_, confirm := do("GET", "/confirm?action=retry&id=x", nil, map[string]string{"Authorization": "Bearer bob-0123456789abcdef"})
	m := csrf.FindStringSubmatch(confirm)
	if m == nil {
		t.Fatalf("no CSRF token:\n%s", confirm)
	}
	do("POST", "/action", url.Values{"action": {"retry"}, "id": {"x"}, "csrf": {m[1]}}, map[string]string{"Authorization": "Bearer bob-0123456789abcdef"})
	// alice signs in with the form; her cookie names her.
	resp, _ = do("POST", "/login", url.Values{"token": {"alice-0123456789abcdef"}}, nil)
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cookies) != 1 || strings.Contains(cookies[0].Value, "alice-0123") {
		t.Fatalf("login: %d %v", resp.StatusCode, cookies)
	}
	withCookie := map[string]string{"Cookie": cookies[0].Name + "=" + cookies[0].Value}
	do("POST", "/action", url.Values{"action": {"purge"}, "id": {"x"}, "csrf": {m[1]}}, withCookie)
	// The archive's restore goes by the same token, and names its holder.
	do("POST", "/action", url.Values{"action": {"restore"}, "id": {"x"}, "csrf": {m[1]}}, withCookie)
	if resp, _ := do("POST", "/action", url.Values{"action": {"restore"}, "id": {"x"}, "csrf": {m[1]}}, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("restore without a token: %d, want 401", resp.StatusCode)
	}
	if resp, page := do("GET", "/archive", nil, withCookie); resp.StatusCode != 200 || !strings.Contains(page, "The archive is empty") {
		t.Errorf("/archive: %d\n%s", resp.StatusCode, page)
	}
	if strings.Join(be.who, " ") != "bob alice alice" {
		t.Errorf("the backend was told %q, want bob then alice twice", be.who)
	}
	// Wrong tokens: refused, logged, the value nowhere.
	for _, hdr := range []map[string]string{{"Authorization": "Bearer wrong-token-9876543210-secret"}, {"Cookie": cookieName + "=wrong-token-9876543210-secret"}} {
		if resp, _ := do("GET", "/", nil, hdr); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%v: %d, want 401", hdr, resp.StatusCode)
		}
	}
	if resp, _ := do("POST", "/login", url.Values{"token": {"wrong-token-9876543210-secret"}}, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("login with a wrong token: %d", resp.StatusCode)
	}
	logMu.Lock()
	got := log.String()
	logMu.Unlock()
	if strings.Count(got, "refused") != 3 || strings.Contains(got, "9876543210") || !strings.Contains(got, "a wrong token (Authorization: Bearer)") {
		t.Errorf("log:\n%s", got)
	}
	if resp, body := do("GET", "/healthz", nil, nil); resp.StatusCode != 200 || !strings.Contains(body, `"claim_dead":7`) {
		t.Errorf("/healthz without a token: %d %s", resp.StatusCode, body)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestReloadIsNotARecount: the groups page's reload goes to /, so that a
// page opened with "Count again now" (/?refresh=1) does not walk
// claim.dead at every reload.
func TestReloadIsNotARecount(t *testing.T) {
	h, err := New(Config{Addr: "127.0.0.1:0", Backend: &stub{}, Refresh: 5e9})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/?refresh=1", nil)
	r.Host = "127.0.0.1"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if body := rec.Body.String(); !strings.Contains(body, `<meta http-equiv="refresh" content="5; url=/">`) {
		t.Errorf("the reload:\n%s", body)
	}
}
