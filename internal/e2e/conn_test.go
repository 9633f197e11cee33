package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/cli"
	"eaimq/internal/store"
)

// connSentinel is in every password these tests use: it must show in no
// output of any program, in any spelling.
const connSentinel = "S3ntinel"

// connProgram is how one installed program is called for these tests.
type connProgram struct {
	name string
	args []string
	// leakOnly: the program only reads the vhost name from EAI_AMQP_URL and
	// never dials it; only "no password in the output" applies.
	leakOnly bool
}

// connPrograms returns every program that reads EAI_AMQP_URL (claimsys has
// none), called as a user would, and the environment they share.
func connPrograms(t *testing.T) (bin string, progs []connProgram, env map[string]string) {
	t.Helper()
	bin = installed(t)
	dir := t.TempDir()
	claim := filepath.Join(dir, "claim.json")
	if err := os.WriteFile(claim, []byte(`{"guid":"g1","claimId":"C-1","docs":["a.pdf"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// An existing store, so that dlq has nothing to warn about before the
	// connection error and its first line is that error.
	db := filepath.Join(dir, "processed.db")
	st, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	progs = []connProgram{
		{name: "topology"},
		{name: "publish", args: []string{claim}},
		{name: "consumer", args: []string{"--claim", "http://127.0.0.1:1", "--max-seconds", "1"}},
		{name: "dlq", args: []string{"list"}},
		{name: "brokerstatus", args: []string{"-o", "-"}, leakOnly: true},
	}
	return bin, progs, map[string]string{store.EnvPath: db}
}

// runConn runs an installed program with env on top of this process's
// environment minus every EAI_AMQP_* variable.
func runConn(t *testing.T, path string, args []string, env map[string]string) result {
	t.Helper()
	cmd := exec.Command(path, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EAI_AMQP_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s: %v", path, err)
	}
	return r
}

// tempUser adds a broker user with password and deletes it when the test
// ends: a login that works, so that the vhost is what fails.
func tempUser(t *testing.T, password string) string {
	t.Helper()
	ctl := brokertest.Ctl(t)
	var b [4]byte
	rand.Read(b[:])
	name := "eaimq-conn-" + hex.EncodeToString(b[:])
	if _, err := ctl.Run(context.Background(), "-q", "add_user", name, password); err != nil {
		t.Fatalf("add_user: %v", err)
	}
	t.Cleanup(func() {
		if _, err := ctl.Run(context.Background(), "-q", "delete_user", name); err != nil {
			t.Errorf("delete_user %s: %v", name, err)
		}
	})
	return name
}

// TestConnFailures runs every program on every way the connection can fail,
// each with a password holding connSentinel, and checks the one rule they
// share: the documented exit code, the fix on the first line of stderr,
// and the password nowhere in stdout or stderr.
func TestConnFailures(t *testing.T) {
	t.Parallel()
	bin, progs, env := connPrograms(t)
	vh := brokertest.New(t)
	u, err := url.Parse(vh.URL)
	if err != nil {
		t.Fatal(err)
	}
	host := u.Host // the shared broker's plain AMQP port
	user := tempUser(t, connSentinel+"-user-pw")
	var b [4]byte
	rand.Read(b[:])
	missing := "eaimq-no-such-vhost-" + hex.EncodeToString(b[:])

	for _, tc := range []struct {
		name, url string
		code      int
		fix       string // the first line of stderr says this
	}{
		{"unparsable URL", "amqp://guest:" + connSentinel + "-pw%zz@" + host + "/x", cli.ExitUsage, `"%" as %25`},
		{"bad port", "amqp://guest:" + connSentinel + "pw@127.0.0.1:99999/x", cli.ExitUsage, "port 99999 is out of range"},
		{"wrong password", "amqp://guest:" + connSentinel + "%2Fpw@" + host + u.EscapedPath(), cli.ExitNoPerm, "check the user and password"},
		{"unknown vhost", "amqp://" + user + ":" + connSentinel + "-user-pw@" + host + "/" + missing, cli.ExitConfig, "rabbitmqctl add_vhost " + missing},
		{"broker down", fmt.Sprintf("amqp://guest:%spw@127.0.0.1:%d/x", connSentinel, freePort(t)), cli.ExitUnavailable, "is the broker up? (scripts/mq-up.sh starts one)"},
		{"TLS against the plain port", "amqps://guest:" + connSentinel + "pw@" + host + "/x", cli.ExitUnavailable, "this port does not speak TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range progs {
				t.Run(p.name, func(t *testing.T) {
					t.Parallel()
					e := map[string]string{broker.EnvURL: tc.url}
					for k, v := range env {
						e[k] = v
					}
					r := runConn(t, filepath.Join(bin, p.name), p.args, e)
					if strings.Contains(r.stdout+r.stderr, connSentinel) {
						t.Errorf("%s shows the password (exit %d):\nstdout:\n%s\nstderr:\n%s", p.name, r.code, r.stdout, r.stderr)
					}
					if p.leakOnly {
						return
					}
					first, _, _ := strings.Cut(r.stderr, "\n")
					if r.code != tc.code {
						why := fmt.Sprintf("if broker.Dial is right, the call site in %s/ overrides its code", p.name)
						if strings.Contains(first, "deadline") || strings.Contains(first, "interrupted") {
							why = fmt.Sprintf("%s/ dials with a context that ends before the broker answers (its run deadline, e.g. --max-seconds); "+
								"RabbitMQ answers a wrong password only after 3 s, so the first dial must not be cut by the run's deadline", p.name)
						}
						t.Errorf("%s exits %d, want %d (the rule every program shares): %s\nstderr:\n%s",
							p.name, r.code, tc.code, why, r.stderr)
					}
					if !strings.Contains(first, tc.fix) || !strings.HasPrefix(first, p.name+": ") {
						t.Errorf("%s: first line of stderr\n  %s\nwant %q: and the fix %q\nstderr:\n%s", p.name, first, p.name, tc.fix, r.stderr)
					}
				})
			}
		})
	}
}
