package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestMqUpRemovesItsPolicyWhenAptFails: mq-up.sh keeps the package's
// postinst from starting a node by creating policy-rc.d while it installs
// RabbitMQ. When apt-get fails, that file must not stay behind (it would
// stop every later package from starting its service), while a
// policy-rc.d that was there before is the machine's and stays. Serial:
// it runs the script that installs and starts the machine's broker.
func TestMqUpRemovesItsPolicyWhenAptFails(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("mq-up.sh installs as root; run the tests as root (scripts/test.sh)")
	}
	_, file, _, _ := runtime.Caller(0)
	mqUp := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "mq-up.sh")
	fake := t.TempDir()
	// No rabbitmq-server on this PATH (it lives in /usr/sbin), and an
	// apt-get that fails as a broken mirror would.
	if err := os.WriteFile(filepath.Join(fake, "apt-get"), []byte("#!/bin/sh\necho 'E: mirror unreachable' >&2\nexit 100\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, before := range []bool{false, true} {
		policy := filepath.Join(t.TempDir(), "policy-rc.d")
		if before {
			os.WriteFile(policy, []byte("#!/bin/sh\nexit 0\n"), 0o755)
		}
		cmd := exec.Command("bash", mqUp)
		cmd.Env = append(os.Environ(), "PATH="+fake+":/usr/bin:/bin", "EAIMQ_POLICY_RC="+policy, "EAIMQ_AMQP_PORT=1")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "installing it from Debian") {
			t.Fatalf("before=%v: mq-up.sh did not try and fail the install: %v\n%s", before, err, out)
		}
		_, statErr := os.Stat(policy)
		if before && statErr != nil {
			t.Errorf("the machine's own policy-rc.d was removed")
		}
		if !before && statErr == nil {
			t.Errorf("policy-rc.d left behind after apt-get failed:\n%s", out)
		}
	}
}
