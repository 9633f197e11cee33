package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestPrometheusConfigExample: promtool check config accepts
// deploy/prometheus/prometheus.yml.example once its token file exists (as
// it must in production: promtool and Prometheus both check it), and the
// example scrapes job eaimq-consumer with a bearer token read from a file
// (authorization: credentials_file), never one written in the
// configuration. The repository holds no token file: one committed would
// be a token every installation shares.
func TestPrometheusConfigExample(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool", "prometheus")
	dir := filepath.Join(top(), "deploy", "prometheus")
	conf, err := os.ReadFile(filepath.Join(dir, "prometheus.yml.example"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+authorization:\n\s+type: Bearer\n\s+credentials_file: (\S+)$`).FindSubmatch(conf)
	if m == nil {
		t.Fatal("prometheus.yml.example has no authorization with type Bearer and credentials_file")
	}
	token := string(m[1])
	if filepath.IsAbs(token) {
		t.Fatalf("credentials_file %s: want a path relative to the configuration, so that this test can give it a file", token)
	}
	if _, err := os.Stat(filepath.Join(dir, token)); err == nil {
		t.Errorf("deploy/prometheus/%s is in the repository: a token must not be", token)
	}
	for _, bad := range []string{`(?m)^\s+credentials:`, `(?m)^\s+bearer_token:`} {
		if regexp.MustCompile(bad).Match(conf) {
			t.Errorf("prometheus.yml.example writes a token in the configuration (%s)", bad)
		}
	}
	if !regexp.MustCompile(`(?m)^\s+- job_name: eaimq-consumer$`).Match(conf) {
		t.Error("prometheus.yml.example has no job eaimq-consumer, which the rules name")
	}
	tmp := t.TempDir()
	for _, f := range []string{"prometheus.yml.example", "eaimq.rules.yml"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(promtool, "check", "config", "prometheus.yml.example")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("promtool check config passed without the token file: it no longer checks it?\n%s", out)
	}
	if err := os.WriteFile(filepath.Join(tmp, token), []byte("e2e-prometheus-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(promtool, "check", "config", "prometheus.yml.example")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check config prometheus.yml.example: %v\n%s", err, out)
	}
}
