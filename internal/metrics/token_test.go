package metrics

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testToken = "Xq3vR9sLk2Pz7WmN4tBc8yHd" // 24 characters

func tokenFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "metrics.token")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

// getAuth is "STATUS body" of a GET with an Authorization header (none
// when auth is "").
func getAuth(t *testing.T, url, auth string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func serveWith(t *testing.T, tokenFile string) string {
	t.Helper()
	m := New(Live{Ready: func() (bool, string) { return true, "" }, VHost: "claims"})
	m.QueueReady("claim.in", 3)
	addr, stop, err := m.Serve(context.Background(), "127.0.0.1:0", tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return "http://" + addr
}

// TestMetricsToken: with --metrics-token-file, /metrics answers 401 to a
// request without the token, with a wrong one, or with the token under
// another scheme, and 200 with "Bearer TOKEN" (the file's white space
// trimmed, as Prometheus trims its credentials_file; the scheme in any
// case, as RFC 9110 has it). /healthz and /readyz stay open. Without the
// flag, /metrics is open as before.
func TestMetricsToken(t *testing.T) {
	base := serveWith(t, tokenFile(t, "  "+testToken+"\n", 0o600))
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer " + testToken[:len(testToken)-1], http.StatusUnauthorized},
		{"Bearer " + testToken + "x", http.StatusUnauthorized},
		{"Bearer  " + testToken, http.StatusUnauthorized},
		{"Basic " + testToken, http.StatusUnauthorized},
		{testToken, http.StatusUnauthorized},
		{"Bearer " + testToken, http.StatusOK},
		{"bearer " + testToken, http.StatusOK},
	} {
		code, body, h := getAuth(t, base+"/metrics", tc.auth)
		if code != tc.want {
			t.Errorf("/metrics with Authorization %q: %d, want %d", tc.auth, code, tc.want)
		}
		switch {
		case code == http.StatusOK && !strings.Contains(body, `eaimq_queue_messages_ready{queue="claim.in",vhost="claims"} 3`):
			t.Errorf("/metrics with the token: no metrics in %q", body)
		case code == http.StatusUnauthorized && (strings.Contains(body, "eaimq_") || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer")):
			t.Errorf("/metrics refused: body %q, WWW-Authenticate %q", body, h.Get("WWW-Authenticate"))
		}
		if strings.Contains(body, testToken) {
			t.Errorf("the answer shows the token: %q", body)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body, _ := getAuth(t, base+path, ""); code != http.StatusOK {
			t.Errorf("%s without a token: %d %q; health stays open for probes", path, code, body)
		}
	}
	open := serveWith(t, "")
	if code, body, _ := getAuth(t, open+"/metrics", ""); code != http.StatusOK || !strings.Contains(body, "eaimq_ready 1") {
		t.Errorf("without a token file /metrics answers %d %q, want it open as before", code, body)
	}
}

// TestMetricsTokenFileMistakes: a token file that is missing, unreadable,
// readable by others, too short, or not one word stops the start with an
// error that names the file and the fix, and never shows the token.
func TestMetricsTokenFileMistakes(t *testing.T) {
	unreadable := tokenFile(t, testToken, 0o600)
	if err := os.Chmod(unreadable, 0o200); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path, want string
	}{
		{filepath.Join(t.TempDir(), "missing"), "no such file"},
		{tokenFile(t, testToken, 0o640), "chmod 600"},
		{tokenFile(t, testToken, 0o604), "chmod 600"},
		{tokenFile(t, "short-tok\n", 0o600), "fewer than 16: too easy to guess"},
		{tokenFile(t, "\n\n", 0o600), "holds 0 characters"},
		{tokenFile(t, testToken+" "+testToken, 0o600), "a space or a control character"},
	}
	if os.Geteuid() != 0 { // root reads it anyway
		cases = append(cases, struct{ path, want string }{unreadable, "permission denied"})
	}
	for _, tc := range cases {
		m := New(Live{Ready: func() (bool, string) { return true, "" }})
		_, stop, err := m.Serve(context.Background(), "127.0.0.1:0", tc.path)
		if err == nil {
			stop()
			t.Errorf("%s: served", tc.path)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "--metrics-token-file") ||
			!strings.Contains(msg, tc.path) || strings.Contains(msg, testToken) || strings.Contains(msg, "short-tok") {
			t.Errorf("%s: %q, want it to name the flag, the file and %q, and not the token", tc.path, msg, tc.want)
		}
	}
}
