package nodestatus

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"eaimq/internal/broker"
	"eaimq/internal/cli"
	"eaimq/internal/rabbitctl"
)

// fakeCtl is a rabbitmqctl that prints text for `status`, js for `status
// --formatter json`, and no queues, so that a test can give brokerstatus
// a text and a JSON status that disagree.
func fakeCtl(t *testing.T, text, js []byte) rabbitctl.Ctl {
	dir := t.TempDir()
	tf, jf := filepath.Join(dir, "status.txt"), filepath.Join(dir, "status.json")
	if err := os.WriteFile(tf, text, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jf, js, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "rabbitmqctl")
	script := "#!/bin/sh\ncase \"$*\" in\n" +
		"*list_queues*) echo '[]' ;;\n" +
		"*'status --formatter json'*) cat '" + jf + "' ;;\n" +
		"*status*) cat '" + tf + "' ;;\n" +
		"*) exit 64 ;;\nesac\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return rabbitctl.Ctl{Node: "rabbit@localhost", Bin: bin}
}

// TestVerdictComesFromTheJSON: given real text and JSON outputs that
// disagree, the verdict follows the JSON, and the status file is the
// text, byte for byte.
func TestVerdictComesFromTheJSON(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		text, js string
		code     int
	}{
		{"relative.txt", "absolute.json", 0},
		{"absolute.txt", "relative.json", cli.ExitConfig},
		{"absolute.txt", "other-size.json", cli.ExitConfig},
		{"absolute.txt", "alarm.json", cli.ExitConfig},
	} {
		t.Run(tc.text+"+"+tc.js, func(t *testing.T) {
			text := read(tc.text)
			file := filepath.Join(t.TempDir(), "status.txt")
			var stdout bytes.Buffer
			cfg := Config{Ctl: fakeCtl(t, text, read(tc.js)), OutFile: file, Want: 512 << 20, URL: broker.DefaultURL}
			err := Report(context.Background(), cfg, &stdout)
			if cli.Code(err) != tc.code {
				t.Errorf("exit %d (%v), want %d", cli.Code(err), err, tc.code)
			}
			if saved, err := os.ReadFile(file); err != nil || !bytes.Equal(saved, text) {
				t.Errorf("the status file is not %s byte for byte (%v)", tc.text, err)
			}
		})
	}
}
