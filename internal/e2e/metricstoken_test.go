package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"eaimq/internal/brokertest"
)

// getBearer is the status of a GET with "Authorization: Bearer token"
// (no header when token is ""), and its body.
func getBearer(t *testing.T, url, token string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsTokenFile: a consumer run as a service is, with
// --profile production --metrics-token-file: its /metrics answers 401
// without the token and with a wrong one, 200 with it; /healthz and
// /readyz answer without it. Its log never shows the token. A token file
// others can read stops the start with exit 78 naming the fix.
func TestMetricsTokenFile(t *testing.T) {
	t.Parallel()
	const token = "e2e-metrics-token-5Yh2Lq9Vx"
	w := newWorld(t)
	file := filepath.Join(t.TempDir(), "metrics.token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.publishFiles(brokertest.Claims("tok", "C-tok", 3, true)...)
	// The production profile creates no store: the first deployment's
	// step (docs/operations.md) does.
	if r := w.runEnv(nil, "consumer", "--init-store"); r.code != 0 {
		t.Fatalf("consumer --init-store: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := w.start("consumer", "--claim", w.url, "--max-seconds", "60", "--profile", "production", "--retry-delays", "",
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port), "--metrics-token-file", file)
	brokertest.Eventually(t, 30*time.Second, "/metrics with the token", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		code, body := getBearer(t, base+"/metrics", token)
		return code == http.StatusOK && metric(body, `eaimq_claims_total{outcome="delivered",reason="delivered"}`) == 3
	})
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "e2e-metrics-token-wrong00", http.StatusUnauthorized},
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
	} {
		if code, body := getBearer(t, base+tc.path, tc.token); code != tc.want {
			t.Errorf("%s with token %q: %d %q, want %d", tc.path, tc.token, code, body, tc.want)
		}
	}
	p.stop(t)
	if strings.Contains(p.errb.String(), token) || strings.Contains(p.out.String(), token) {
		t.Error("the consumer's output shows the token")
	}
	if !strings.Contains(p.errb.String(), `"auth":"bearer token on /metrics"`) {
		t.Errorf("the log does not say /metrics asks for a token:\n%s", p.errb.String())
	}

	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	r := w.run("consumer", "--claim", w.url, "--max-seconds", "5", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port),
		"--metrics-token-file", file)
	if r.code != 78 || !strings.Contains(r.stderr, "chmod 600 "+file) || strings.Contains(r.stderr, token) {
		t.Errorf("a token file others can read: exit %d, stderr %q; want 78 naming chmod 600", r.code, r.stderr)
	}
}
