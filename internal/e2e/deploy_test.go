package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/topo"
)

// top is the repository's top directory.
func top() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// tool finds a program a deploy test needs, or fails saying how to get it.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: apt-get install %s (scripts/test.sh installs it when missing)", name, pkg)
	}
	return path
}

// units are the service units, as deploy/systemd has them: each setting
// by its key, every value of a key that repeats.
type unit map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			u[k] = append(u[k], v)
		}
	}
	return u
}

func (u unit) get(k string) string {
	if v := u[k]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// TestServiceUnits: the units pass systemd-analyze verify without a word
// (it exits 0 on warnings, such as an unknown key: any output fails
// here), with ExecStart pointing at the installed binaries and the
// consumer's template as an instance; they restart on failure but not on
// the exit codes that mean "fix the configuration" (2, 77, 78), stop with
// SIGTERM, keep the hardening options, and systemd-analyze security rates
// their exposure OK.
func TestServiceUnits(t *testing.T) {
	t.Parallel()
	analyze := tool(t, "systemd-analyze", "systemd")
	bin := installed(t)
	dir := t.TempDir()
	src := filepath.Join(top(), "deploy", "systemd")
	units := []string{"eaimq-consumer@.service", "eaimq-dlq-serve.service", "eaimq-dlq-ingest.service"}
	for _, name := range units {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(b), "/usr/local/lib/eaimq/", bin+"/")
		if text == string(b) {
			t.Fatalf("%s: no ExecStart under /usr/local/lib/eaimq/ (docs/operations.md installs there)", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	instances := []string{filepath.Join(dir, "eaimq-consumer@partner-a.service"), filepath.Join(dir, "eaimq-dlq-serve.service"),
		filepath.Join(dir, "eaimq-dlq-ingest.service")}
	out, err := exec.Command(analyze, append([]string{"verify"}, instances...)...).CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, path := range instances {
		out, _ := exec.Command(analyze, "security", "--offline=yes", path).CombinedOutput()
		m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) (\S+)`).FindSubmatch(out)
		if m == nil {
			t.Errorf("systemd-analyze security %s: no overall exposure in\n%s", filepath.Base(path), out)
			continue
		}
		if level, _ := strconv.ParseFloat(string(m[1]), 64); level > 2.0 {
			t.Errorf("%s: exposure %s %s, want at most 2.0 (OK)", filepath.Base(path), m[1], m[2])
		}
	}
	for _, name := range units {
		checkUnit(t, name, readUnit(t, filepath.Join(src, name)))
	}
	// dlq ingest's SIGTERM ends its batch (commit, then ack) before it
	// exits: the unit must send SIGTERM and give it the time, and it
	// reads the page's settings (the broker, and the store it writes).
	if u := readUnit(t, filepath.Join(src, "eaimq-dlq-ingest.service")); u.get("EnvironmentFile") != "/etc/eaimq/dlq-serve.env" ||
		!strings.Contains(u.get("ExecStart"), "dlq ingest $EAIMQ_DLQ_INGEST_FLAGS") {
		t.Errorf("eaimq-dlq-ingest.service: EnvironmentFile=%s ExecStart=%s", u.get("EnvironmentFile"), u.get("ExecStart"))
	}
}

// checkUnit checks what a unit must say, besides what verify checks.
func checkUnit(t *testing.T, name string, u unit) {
	t.Helper()
	if stop := strings.Fields(u.get("RestartPreventExitStatus")); !slices.Contains(stop, "2") || !slices.Contains(stop, "77") || !slices.Contains(stop, "78") {
		t.Errorf("%s: RestartPreventExitStatus=%v, want 2 77 78 among them", name, stop)
	}
	for k, want := range map[string]string{
		"Restart": "on-failure", "KillSignal": "SIGTERM", "User": "eaimq", "StateDirectory": "eaimq",
		"StateDirectoryMode": "0700", "UMask": "0077", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
		"ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "",
		"RestrictSUIDSGID": "yes", "MemoryDenyWriteExecute": "yes", "SystemCallFilter": "@system-service",
		"StartLimitIntervalSec": "0",
	} {
		if _, ok := u[k]; !ok || u.get(k) != want {
			t.Errorf("%s: %s=%q, want %q", name, k, u.get(k), want)
		}
	}
	if !strings.HasPrefix(u.get("EnvironmentFile"), "/etc/eaimq/") {
		t.Errorf("%s: EnvironmentFile=%s, want one under /etc/eaimq", name, u.get("EnvironmentFile"))
	}
}

// TestPrometheusRules: promtool checks the alert rules and the scrape
// configuration, and passes the rules' unit tests; every alert's runbook
// link names a section docs/operations.md has; and each panel query of
// the Grafana dashboard is valid PromQL (promtool checks them as the
// recording rules of a file of their own).
func TestPrometheusRules(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool", "prometheus")
	dir := filepath.Join(top(), "deploy", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "eaimq.rules.yml"},
		{"test", "rules", "eaimq.rules.test.yml"},
		// check config: TestPrometheusConfigExample (it needs a token file).
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	checkRunbooks(t, filepath.Join(dir, "eaimq.rules.yml"))
	exprs := dashboardQueries(t)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(e) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "      - record: dashboard:panel_%d\n        expr: %s\n", i, q)
	}
	file := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("the dashboard's queries: %v\n%s", err, out)
	}
}

// dashboardQueries is every panel query of deploy/grafana/eaimq.json.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(top(), "deploy", "grafana", "eaimq.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("eaimq.json: %v", err)
	}
	var out []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			out = append(out, q.Expr)
		}
	}
	if len(out) < 10 {
		t.Errorf("the dashboard has %d queries", len(out))
	}
	return out
}

// checkRunbooks: each runbook link of the rules is docs/operations.md#X,
// X the alert's name in lower case, and the page has that anchor.
func checkRunbooks(t *testing.T, rules string) {
	t.Helper()
	b, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile(filepath.Join(top(), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := markdownAnchors(string(ops))
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)`).FindAllStringSubmatch(string(b), -1)
	links := regexp.MustCompile(`runbook: docs/operations.md#(\S+)`).FindAllStringSubmatch(string(b), -1)
	if len(alerts) == 0 || len(alerts) != len(links) {
		t.Fatalf("%d alerts, %d runbook links", len(alerts), len(links))
	}
	for i, a := range alerts {
		if want := strings.ToLower(a[1]); links[i][1] != want {
			t.Errorf("alert %s links to #%s, want #%s", a[1], links[i][1], want)
		}
		if !anchors[links[i][1]] {
			t.Errorf("alert %s: docs/operations.md has no section #%s", a[1], links[i][1])
		}
	}
}

// markdownAnchors are the anchors GitHub makes of a page's headings: in
// lower case, punctuation but - and _ dropped, spaces as -.
func markdownAnchors(page string) map[string]bool {
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	for _, line := range strings.Split(page, "\n") {
		if h := strings.TrimLeft(line, "#"); h != line && strings.HasPrefix(h, " ") {
			a := drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), "")
			out[strings.ReplaceAll(a, " ", "-")] = true
		}
	}
	return out
}

// TestProductionPermissions: the broker permissions docs/operations.md
// gives a consumer's user (read from its set_permissions line) are enough
// for what the deploy steps do with that user: topology -retry-delays of
// the production profile's delays, and the consumer with --profile
// production delivering a claim, dead-lettering a 422 (its route checked
// first) and sending a 503's delayed copy to claim.retry.30s.
func TestProductionPermissions(t *testing.T) {
	t.Parallel()
	ops, err := os.ReadFile(filepath.Join(top(), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`rabbitmqctl set_permissions -p \S+ \S+ '([^']*)' '([^']*)' '([^']*)'`).FindSubmatch(ops)
	if m == nil {
		t.Fatal("docs/operations.md has no rabbitmqctl set_permissions line")
	}
	w := newWorld(t)
	const password = "a-test-password-1"
	user := tempUser(t, password)
	if _, err := w.vh.Ctl.Run(context.Background(), "-q", "set_permissions", "-p", w.vh.Name, user, string(m[1]), string(m[2]), string(m[3])); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(w.vh.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	env := append(w.env(), broker.EnvURL+"="+u.String())
	const delays = "30s,2m,10m,30m,1h" // the production profile's: consumer.env.example's EAIMQ_RETRY_DELAYS
	cmd := exec.Command(filepath.Join(w.bin, "topology"), "-retry-delays", delays)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("topology -retry-delays %s as %s: %v\n%s", delays, user, err, out)
	}
	w.publishFiles(brokertest.Claim("perm-ok", "C-ok", "r.pdf"), brokertest.Claim("perm-422", "C-422"), brokertest.Claim("perm-busy", "BUSY-1", "r.pdf"))
	// The production profile creates no store: a deployment's first step
	// does (docs/operations.md).
	if r := w.runEnv(nil, "consumer", "--init-store"); r.code != 0 {
		t.Fatalf("consumer --init-store: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	p := w.startEnv(env, "consumer", "--claim", w.url, "--profile", "production", "--max-seconds", "120",
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	brokertest.Eventually(t, 60*time.Second, "delivered, dead-lettered and delayed", func() bool {
		if p.exited() {
			t.Fatalf("consumer exited: %s", p.errb.String())
		}
		q := w.vh.Queues(t)
		return w.partner.Stats().Accepted["perm-ok"] == 1 && q[topo.DeadQueue].Messages == 1 && q["claim.retry.30s"].Messages == 1
	})
	p.stop(t)
	if code := p.cmd.ProcessState.ExitCode(); code != 0 || strings.Contains(p.errb.String(), "ACCESS_REFUSED") || strings.Contains(p.errb.String(), "permission") {
		t.Errorf("exit %d:\n%s", code, p.errb.String())
	}
}

// TestDelayedCopyRefused: a user that may not write to the default
// exchange (through which a delayed copy reaches its delay queue) gets its
// copy refused with 403. That is a setting to fix, not a moment to wait
// out: the consumer stops with exit 78 naming the permission, the claim
// stays in claim.in, and the partner is called once, not again and again
// as each requeued claim came straight back.
func TestDelayedCopyRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const password = "a-test-password-2"
	user := tempUser(t, password)
	if _, err := w.vh.Ctl.Run(context.Background(), "-q", "set_permissions", "-p", w.vh.Name, user,
		".*", `^(eai\.claim|eai\.dlx|claim\..*)$`, ".*"); err != nil {
		t.Fatal(err)
	}
	if r := w.run("topology", "-retry-delays", "1s"); r.code != 0 {
		t.Fatalf("topology -retry-delays 1s: %s", r.stderr)
	}
	u, err := url.Parse(w.vh.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	env := append(w.env(), broker.EnvURL+"="+u.String())
	w.publishFiles(brokertest.Claim("refused-busy", "BUSY-r", "r.pdf"))
	p := w.startEnv(env, "consumer", "--claim", w.url, "--retry-delays", "1s", "--max-seconds", "60")
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the consumer went on after its delayed copy was refused:\n%s", p.errb.String())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 78 || !strings.Contains(p.errb.String(), "write permission on amq.default") {
		t.Errorf("exit %d, want 78 naming the permission:\n%s", code, p.errb.String())
	}
	if n := w.partner.Stats().ByGuid["refused-busy"]; n != 1 {
		t.Errorf("the claim was called %d times, want 1", n)
	}
	if q := w.vh.Queues(t)[topo.Queue]; q.Messages != 1 {
		t.Errorf("claim.in holds %d, want the claim back in it", q.Messages)
	}
}

// TestEnvFiles: each environment file of deploy/systemd reads the same in
// the two places it is read: by systemd (the unit's EnvironmentFile=) and
// by bash, as the runbooks source it (set -a; . FILE; set +a). A value
// with spaces once broke the shell's reading: bash ran "production" as a
// command and left EAIMQ_CONSUMER_FLAGS empty, so the runbook's by-hand
// run used the lab's defaults, not the profile the unit runs with.
//
// No systemd runs here (PID 1 is not systemd), so no unit can be started
// to show its environment. systemd's own parser of these files
// (parse_env_file, shared by EnvironmentFile= and environment.d) is run
// through systemd-environment-d-generator instead. That generator also
// expands $VAR, which EnvironmentFile= does not; the files have no $ in a
// value (checked below), so the two readings are one.
//
// The variables the units put in ExecStart unbraced ($EAIMQ_CONSUMER_FLAGS)
// are split into words by systemd; the test checks the shell's words are
// the same, and that the program accepts them (-version parses every flag
// first, and exits 2 on one it does not know).
func TestEnvFiles(t *testing.T) {
	t.Parallel()
	bash := tool(t, "bash", "bash")
	gen := "/usr/lib/systemd/user-environment-generators/30-systemd-environment-d-generator"
	if _, err := os.Stat(gen); err != nil {
		t.Fatalf("%v: apt-get install systemd (the test reads the files with systemd's own parser)", err)
	}
	bin := installed(t)
	for _, tc := range []struct {
		file, split string
		run         []string // the unit's ExecStart, before the split variable
	}{
		{"consumer.env.example", "EAIMQ_CONSUMER_FLAGS", []string{"consumer", "--claim", "${EAIMQ_CLAIM_URL}"}},
		{"dlq-serve.env.example", "EAIMQ_DLQ_FLAGS", []string{"dlq", "serve", "-addr", "${EAIMQ_DLQ_ADDR}"}},
		// The same file, as eaimq-dlq-ingest.service reads it.
		{"dlq-serve.env.example", "EAIMQ_DLQ_INGEST_FLAGS", []string{"dlq", "ingest"}},
	} {
		t.Run(tc.file+"/"+tc.split, func(t *testing.T) {
			path := filepath.Join(top(), "deploy", "systemd", tc.file)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(raw), "\n") {
				if !strings.HasPrefix(line, "#") && strings.ContainsAny(line, "$`\\") {
					t.Errorf("line %d: %q: a shell expands $, ` and \\ and systemd does not; write them %%24, %%60, %%5C", i+1, line)
				}
			}
			sd := systemdEnv(t, gen, path)
			sh := sourcedEnv(t, bash, path)
			if _, ok := sd[tc.split]; !ok {
				t.Fatalf("systemd reads %d variables from %s, not %s", len(sd), tc.file, tc.split)
			}
			for k, v := range sd {
				if got, ok := sh[k]; !ok || got != v {
					t.Errorf("%s: systemd reads %q, bash (set -a; . FILE) %q (set: %v)", k, hidden(v), hidden(got), ok)
				}
			}
			for k, v := range sh {
				if _, ok := sd[k]; !ok {
					t.Errorf("%s=%q: bash sets it, systemd does not", k, hidden(v))
				}
			}
			// systemd splits an unbraced $VAR at whitespace and takes quotes
			// off its words; bash splits at whitespace too, but would keep
			// quotes and expand a glob: so neither may be in the value.
			flags := sd[tc.split]
			if strings.ContainsAny(flags, `"'*?[`) {
				t.Errorf("%s=%q: quotes or glob characters read differently in the unit and in a shell", tc.split, flags)
			}
			out, err := exec.Command(bash, "-c", `set -a; . "$1"; set +a; printf '%s\n' $`+tc.split, "bash", path).Output()
			if err != nil {
				t.Fatal(err)
			}
			if words := strings.Fields(string(out)); !slices.Equal(words, strings.Fields(flags)) {
				t.Errorf("the shell's words of $%s: %q, the unit's: %q", tc.split, words, strings.Fields(flags))
			}
			args := []string{}
			for _, a := range tc.run[1:] {
				if strings.HasPrefix(a, "${") {
					a = sd[strings.Trim(a, "${}")]
				}
				args = append(args, a)
			}
			args = append(append(args, strings.Fields(flags)...), "-version")
			cmd := exec.Command(filepath.Join(bin, tc.run[0]), args...)
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s %q: %v\n%s", tc.run[0], args, err, out)
			}
		})
	}
}

// systemdEnv is what systemd reads from an environment file, by its own
// parser: the generator run on a directory holding only that file, less
// what it prints without it (the host's /etc/environment.d).
func systemdEnv(t *testing.T, gen, path string) map[string]string {
	t.Helper()
	read := func(file string) map[string]string {
		home := t.TempDir()
		if file != "" {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(home, "environment.d"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(home, "environment.d", "50-test.conf"), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(gen)
		cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + home}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", gen, err, stderr.String())
		}
		env := map[string]string{}
		// An empty value (KEY=) is where the generator parts from
		// EnvironmentFile=: it skips the line as "invalid syntax", where
		// EnvironmentFile= sets KEY to "" (load_env_file_push). Such a
		// line is taken as EnvironmentFile= takes it; any other word on
		// stderr fails.
		for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			m := regexp.MustCompile(`^(.*):\d+: invalid syntax \(around "(\w+)"\), ignoring\.$`).FindStringSubmatch(line)
			switch {
			case line == "":
			case m != nil && m[1] == filepath.Join(home, "environment.d", "50-test.conf") && emptyAssignment(file, m[2]):
				env[m[2]] = ""
			default:
				t.Fatalf("%s on %s: %s", filepath.Base(gen), file, line)
			}
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			env[k] = unquoteGenerated(t, v)
		}
		return env
	}
	env, host := read(path), read("")
	for k, v := range host {
		if env[k] == v {
			delete(env, k)
		}
	}
	return env
}

// hidden is a value fit for a failure message: one that may hold a
// password (a URL's userinfo) is not shown.
func hidden(v string) string {
	if strings.Contains(v, "@") {
		return "(a value with userinfo, not shown)"
	}
	return v
}

// emptyAssignment says whether file has the line "key=" and nothing more.
func emptyAssignment(file, key string) bool {
	b, _ := os.ReadFile(file)
	return slices.Contains(strings.Split(string(b), "\n"), key+"=")
}

// unquoteGenerated undoes the generator's quoting of a value: none, or
// double quotes with \ before ", \, ` and $.
func unquoteGenerated(t *testing.T, v string) string {
	t.Helper()
	if !strings.HasPrefix(v, `"`) {
		return v
	}
	if len(v) < 2 || !strings.HasSuffix(v, `"`) {
		t.Fatalf("the generator printed %q", v)
	}
	var b strings.Builder
	v = v[1 : len(v)-1]
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// sourcedEnv is what the runbooks' `set -a; . FILE; set +a` exports: the
// environment after it, less bash's own variables. Anything on stderr
// (such as "production: command not found") fails.
func sourcedEnv(t *testing.T, bash, path string) map[string]string {
	t.Helper()
	cmd := exec.Command(bash, "-c", `set -a; . "$1"; set +a; exec env -0`, "bash", path)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() != 0 {
		t.Fatalf("set -a; . %s; set +a: %v\n%s", path, err, stderr.String())
	}
	env := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "PWD", "SHLVL", "_", "OLDPWD":
		default:
			env[k] = v
		}
	}
	return env
}

// TestRunbookByHand: the runbook "A consumer that will not start" runs the
// consumer by hand "as the service would run". Its commands are run here
// as docs/operations.md has them, on consumer.env.example, with the
// consumer replaced by a script that prints what it was given: the
// production profile's flags as the unit passes them, the runbook's own
// flags last, and the unit's store unless the file names one.
func TestRunbookByHand(t *testing.T) {
	t.Parallel()
	bash := tool(t, "bash", "bash")
	ops, err := os.ReadFile(filepath.Join(top(), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(ops), "\n### A consumer that will not start\n")
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(section)
	if !ok || m == nil {
		t.Fatal(`docs/operations.md: no "A consumer that will not start" with a sh block`)
	}
	dir := t.TempDir()
	stub := filepath.Join(dir, "consumer")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\nprintf '%s\\0' \"EAI_MQ_DB=$EAI_MQ_DB\" \"$@\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(top(), "deploy", "systemd", "consumer.env.example"))
	if err != nil {
		t.Fatal(err)
	}
	const pg = "postgres://eaimq@db.example/eaimq?sslmode=verify-full"
	withStore := strings.Replace(string(example), "\n#EAI_MQ_DB="+pg+"\n", "\nEAI_MQ_DB="+pg+"\n", 1)
	if withStore == string(example) {
		t.Fatalf("consumer.env.example has no line #EAI_MQ_DB=%s to try", pg)
	}
	for _, tc := range []struct {
		name, env, store string
	}{
		{"the unit's store", string(example), "/var/lib/eaimq/partner-a.db"},
		{"the file's store", withStore, pg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			envFile := filepath.Join(t.TempDir(), "consumer-partner-a.env")
			if err := os.WriteFile(envFile, []byte(tc.env), 0o600); err != nil {
				t.Fatal(err)
			}
			script := m[1]
			for _, r := range [][2]string{
				{"/etc/eaimq/consumer-partner-a.env", envFile},
				{"runuser -u eaimq -- ", ""},
				{"/usr/local/lib/eaimq/consumer", stub},
			} {
				if !strings.Contains(script, r[0]) {
					t.Fatalf("the runbook's commands lack %q:\n%s", r[0], m[1])
				}
				script = strings.ReplaceAll(script, r[0], r[1])
			}
			cmd := exec.Command(bash, "-e", "-c", "systemctl() { :; }\n"+script)
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil || stderr.Len() != 0 {
				t.Fatalf("the runbook's commands: %v\n%s", err, stderr.String())
			}
			sd := systemdEnv(t, "/usr/lib/systemd/user-environment-generators/30-systemd-environment-d-generator", envFile)
			want := append([]string{"EAI_MQ_DB=" + tc.store, "--claim", sd["EAIMQ_CLAIM_URL"]}, strings.Fields(sd["EAIMQ_CONSUMER_FLAGS"])...)
			want = append(want, "--max-seconds", "5", "--log-format", "text")
			if got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"); !slices.Equal(got, want) || !slices.Contains(got, "production") {
				t.Errorf("the runbook runs the consumer with %q, want %q (the unit's, then the runbook's)", got, want)
			}
		})
	}
}
