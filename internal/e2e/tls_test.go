package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/cli"
	"eaimq/internal/rabbitctl"
	"eaimq/internal/store"
	"eaimq/internal/topo"
)

// tlsNode starts a broker node of the test's own with a TLS listener (and
// a plain one, for the wrong-scheme case) on loopback, whose certificate
// is valid for "localhost" only and which requires a client certificate
// signed by the same throwaway CA. Its config, certificates and data live
// in one directory under /var/lib/rabbitmq (the server runs as rabbitmq
// and must read them), removed with the node when the test ends.
func tlsNode(t *testing.T) (ctl rabbitctl.Ctl, tlsPort, plainPort int, pki *brokertest.PKI) {
	t.Helper()
	const node = "eaimqtls@localhost"
	if _, err := exec.LookPath("rabbitmq-server"); err != nil {
		t.Fatalf("rabbitmq-server is not installed: %v; scripts/mq-up.sh installs it", err)
	}
	dir, err := os.MkdirTemp("/var/lib/rabbitmq", "eaimq-tls-")
	if err != nil {
		t.Fatalf("a directory the broker can read: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pki = brokertest.NewPKI(t, dir, "localhost")
	tlsPort, plainPort, distPort := freePort(t), freePort(t), freePort(t)
	conf := fmt.Sprintf(`listeners.tcp.1 = 127.0.0.1:%d
listeners.ssl.1 = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
loopback_users.guest = true
vm_memory_high_watermark.absolute = 512MiB
`, plainPort, tlsPort, pki.CA, pki.ServerCert, pki.ServerKey)
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("eaimqtls.conf", conf)
	write("enabled_plugins", "[].\n") // no management listener to collide
	if err := os.MkdirAll(filepath.Join(dir, "mnesia"), 0o755); err != nil {
		t.Fatal(err)
	}
	if u, err := user.Lookup("rabbitmq"); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, uid, gid) })
	}
	os.Chmod(dir, 0o755)

	ctl = rabbitctl.Ctl{Node: node}
	cmd := exec.Command("rabbitmq-server", "-detached")
	cmd.Env = append(os.Environ(),
		"RABBITMQ_NODENAME="+node,
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "eaimqtls"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", plainPort),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", distPort),
		"ERL_EPMD_ADDRESS=127.0.0.1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start node %s: %v\n%s", node, err, out)
	}
	// Registered before any vhost on the node, so it runs after their
	// deletion.
	t.Cleanup(func() {
		if _, err := ctl.Run(context.Background(), "stop"); err != nil {
			t.Logf("stop node %s: %v", node, err)
		}
	})
	deadline := time.Now().Add(120 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := ctl.Run(ctx, "-q", "await_startup")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not up within 120s: %v; see /var/log/rabbitmq/%s.log", node, err, node)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return ctl, tlsPort, plainPort, pki
}

// TestTLSEndToEnd: topology, publish and consumer deliver a claim over
// amqps:// with the broker's CA in EAI_AMQP_CA and a client certificate;
// then each way the TLS settings can be wrong is refused with its fix.
// Serial, as every test that starts a broker node of its own.
func TestTLSEndToEnd(t *testing.T) {
	ctl, tlsPort, plainPort, pki := tlsNode(t)
	vh := brokertest.NewOn(t, ctl, fmt.Sprintf("amqps://guest:guest@localhost:%d/", tlsPort))
	bin := installed(t)
	partner := claimsys.New()
	partnerURL := newPartnerServer(t, partner)
	dir := t.TempDir()
	claim := filepath.Join(dir, "claim.json")
	if err := os.WriteFile(claim, brokertest.Claim("tls-1", "C-TLS-1", "receipt.pdf"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := map[string]string{
		broker.EnvURL:  vh.URL,
		broker.EnvCA:   pki.CA,
		broker.EnvCert: pki.ClientCert,
		broker.EnvKey:  pki.ClientKey,
		store.EnvPath:  filepath.Join(dir, "processed.db"),
	}
	// with returns good changed by key, value pairs; an empty value unsets.
	with := func(kv ...string) map[string]string {
		e := map[string]string{}
		for k, v := range good {
			e[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(e, kv[i])
			} else {
				e[kv[i]] = kv[i+1]
			}
		}
		return e
	}

	for _, step := range []struct {
		name string
		args []string
	}{
		{"topology", nil},
		{"publish", []string{claim}},
		{"consumer", []string{"--claim", partnerURL, "--max-seconds", "3"}},
	} {
		if r := runConn(t, filepath.Join(bin, step.name), step.args, good); r.code != 0 {
			t.Fatalf("%s over amqps: exit %d\n%s%s", step.name, r.code, r.stdout, r.stderr)
		}
	}
	if n := partner.Stats().Accepted["tls-1"]; n != 1 {
		t.Errorf("the claim reached the partner %d times over amqps, want 1", n)
	}
	if q := vh.Queues(t)[topo.Queue]; q.Messages != 0 || q.Unacked != 0 {
		t.Errorf("claim.in after the consumer: %+v, want empty", q)
	}

	for _, tc := range []struct {
		name string
		env  map[string]string
		code int
		says []string // the first line of stderr says each
	}{
		{"system roots (no EAI_AMQP_CA)", with(broker.EnvCA, ""), cli.ExitConfig,
			[]string{"not trust", "set EAI_AMQP_CA"}},
		{"certificate not valid for 127.0.0.1", with(broker.EnvURL, strings.Replace(vh.URL, "@localhost:", "@127.0.0.1:", 1)), cli.ExitConfig,
			[]string{`not valid for "127.0.0.1"`, `only for "localhost"`}},
		{"no client certificate", with(broker.EnvCert, "", broker.EnvKey, ""), cli.ExitConfig,
			[]string{"wants a client certificate", "EAI_AMQP_CERT"}},
		{"client certificate without its key", with(broker.EnvKey, ""), cli.ExitConfig,
			[]string{"EAI_AMQP_CERT and EAI_AMQP_KEY"}},
		{"unreadable CA file", with(broker.EnvCA, filepath.Join(dir, "missing-ca.pem")), cli.ExitConfig,
			[]string{"EAI_AMQP_CA", "missing-ca.pem"}},
		{"amqps against the plain port", with(broker.EnvURL, strings.Replace(vh.URL, fmt.Sprintf(":%d/", tlsPort), fmt.Sprintf(":%d/", plainPort), 1)), cli.ExitUnavailable,
			[]string{"this port does not speak TLS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runConn(t, filepath.Join(bin, "topology"), nil, tc.env)
			first, _, _ := strings.Cut(r.stderr, "\n")
			if r.code != tc.code || !strings.HasPrefix(first, "topology: ") || !brokertest.ContainsAll(first, tc.says...) {
				t.Errorf("exit %d, want %d with a first line saying %q:\n%s", r.code, tc.code, tc.says, r.stderr)
			}
		})
	}
}
