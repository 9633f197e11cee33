package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"eaimq/internal/broker"
	"eaimq/internal/brokertest"
	"eaimq/internal/claimsys"
	"eaimq/internal/rabbitctl"
	"eaimq/internal/store"
)

var (
	installOnce sync.Once
	installDir  string
	installErr  error
)

// installed runs scripts/install.sh once into a temporary directory and
// returns it: the binaries and the lab's .py names, as the grader sees them.
func installed(t testing.TB) string {
	t.Helper()
	installOnce.Do(func() {
		dir, err := os.MkdirTemp("", "eaimq-install-")
		if err != nil {
			installErr = err
			return
		}
		_, file, _, _ := runtime.Caller(0)
		top := filepath.Join(filepath.Dir(file), "..", "..")
		cmd := exec.Command("bash", filepath.Join(top, "scripts", "install.sh"), dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			installErr = fmt.Errorf("scripts/install.sh: %v\n%s", err, out)
			return
		}
		installDir = dir
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
	return installDir
}

// world is one test's: a vhost with the topology declared by the real
// topology program, a dedup store path, and an in-process claim system.
type world struct {
	t       *testing.T
	vh      *brokertest.VHost
	db      string
	partner *claimsys.Server
	url     string
	bin     string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, vh: brokertest.New(t), db: filepath.Join(t.TempDir(), "processed.db"), bin: installed(t)}
	w.partner = claimsys.New()
	srv := httptest.NewServer(w.partner)
	t.Cleanup(srv.Close)
	w.url = srv.URL
	if r := w.run("topology.py"); r.code != 0 {
		t.Fatalf("topology.py: %d %s", r.code, r.stderr)
	}
	return w
}

// onNode is a world on a new vhost of node, a private node the caller
// started (brokertest.PrivateNode, first: its vhosts go before it does),
// with a store file and a claim system of its own (no server yet).
func onNode(t *testing.T, node string, port int) (*world, rabbitctl.Ctl) {
	t.Helper()
	ctl := rabbitctl.Ctl{Node: node}
	w := &world{t: t, vh: brokertest.NewOn(t, ctl, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port)),
		db: filepath.Join(t.TempDir(), "processed.db"), bin: installed(t), partner: claimsys.New()}
	return w, ctl
}

func (w *world) env() []string {
	return append(os.Environ(), broker.EnvURL+"="+w.vh.URL, store.EnvPath+"="+w.db)
}

type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// run runs an installed program (by path, as the grader does) to its end.
func (w *world) run(name string, args ...string) result {
	w.t.Helper()
	cmd := exec.Command(filepath.Join(w.bin, name), args...)
	cmd.Env = w.env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatalf("run %s: %v", name, err)
	}
	return r
}

// proc is a program running in the background.
type proc struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	errb brokertest.Buffer
	done chan struct{}
}

func (w *world) start(name string, args ...string) *proc {
	w.t.Helper()
	return w.startEnv(w.env(), name, args...)
}

// startEnv is start with the environment env.
func (w *world) startEnv(env []string, name string, args ...string) *proc {
	w.t.Helper()
	p := &proc{cmd: exec.Command(filepath.Join(w.bin, name), args...), done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errb
	if err := p.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	w.t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGINT (the first signal: drain and exit) and waits.
func (p *proc) stop(t testing.TB) {
	t.Helper()
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s of SIGINT", p.cmd.Path)
	}
}

// kill sends SIGKILL and waits.
func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// publishFiles writes each claim to a file and publishes them with the
// installed publish.py in one call; it returns the guids confirmed.
func (w *world) publishFiles(claims ...[]byte) []string {
	w.t.Helper()
	dir := w.t.TempDir()
	var files, guids []string
	for i, c := range claims {
		f := filepath.Join(dir, fmt.Sprintf("c%05d.json", i))
		if err := os.WriteFile(f, c, 0o644); err != nil {
			w.t.Fatal(err)
		}
		files = append(files, f)
		var g struct {
			Guid string `json:"guid"`
		}
		json.Unmarshal(c, &g)
		guids = append(guids, g.Guid)
	}
	if r := w.run("publish.py", files...); r.code != 0 {
		w.t.Fatalf("publish.py: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	return guids
}

// freePort returns a loopback port nobody listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// getStats reads GET /_stats from a claim system over HTTP.
func getStats(t testing.TB, base string) claimsys.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/_stats", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /_stats: %v", err)
	}
	defer resp.Body.Close()
	var st claimsys.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func newPartnerServer(t testing.TB, p *claimsys.Server) string {
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv.URL
}
