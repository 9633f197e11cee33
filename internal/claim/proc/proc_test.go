package proc

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestLiveness: this process is not gone; a process that ended is; a
// holder on another host, or a name that is not Holder's, is not known to
// be gone.
func TestLiveness(t *testing.T) {
	me := Holder()
	if Holder() == me {
		t.Error("two calls of Holder gave one name")
	}
	var l Liveness
	if l.Gone(me) {
		t.Fatalf("this process (%s) is gone", me)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatalf("run true: %v", err)
	}
	host, _ := os.Hostname()
	ended := strings.Join([]string{host, strconv.Itoa(cmd.Process.Pid), "1", "1"}, ":")
	if !l.Gone(ended) {
		t.Errorf("%s, which ended, is not gone", ended)
	}
	for _, h := range []string{"elsewhere.example:1:1:1", "not a holder", ""} {
		if l.Gone(h) {
			t.Errorf("%q is gone", h)
		}
	}
}
