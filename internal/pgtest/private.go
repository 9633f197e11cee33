package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a PostgreSQL server of a test's own: its own data directory
// and port, run as the postgres user with this machine's PostgreSQL
// binaries, so that a test can crash it and start it again (the machine's
// server is never stopped). URL reaches its database eaimq.
type Server struct {
	URL  string
	dir  string
	port int
	bin  string
}

// PrivateServer initializes and starts a Server, and stops it (and removes
// its files) when the test ends.
func PrivateServer(t testing.TB) *Server {
	t.Helper()
	skipShort(t, "a PostgreSQL server of its own")
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		t.Fatalf("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin: %s", howToStart)
	}
	sort.Strings(bins)
	s := &Server{bin: filepath.Dir(bins[len(bins)-1]), port: freePort(t)}
	var err error
	if s.dir, err = os.MkdirTemp("", "eaimq-pg-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(s.dir) })
	if out, err := exec.Command("chown", "postgres:postgres", s.dir).CombinedOutput(); err != nil {
		t.Fatalf("chown the data directory to postgres (the tests run as root): %v: %s", err, out)
	}
	s.asPostgres(t, "initdb", "-D", s.dir+"/data", "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
	s.Start(t)
	t.Cleanup(func() { s.pgctl("stop", "-m", "immediate") })
	base := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/", s.port)
	c := connect(t, base+"postgres")
	defer c.Close(context.Background())
	if _, err := c.Exec(context.Background(), "CREATE DATABASE eaimq"); err != nil {
		t.Fatal(err)
	}
	s.URL = base + "eaimq"
	return s
}

// Crash stops the server at once, as a power cut or a kill -9 of its
// processes would leave it (pg_ctl stop -m immediate: no checkpoint, the
// WAL replayed at the next start).
func (s *Server) Crash(t testing.TB) {
	t.Helper()
	if out, err := s.pgctl("stop", "-m", "immediate"); err != nil {
		t.Fatalf("pg_ctl stop -m immediate: %v: %s", err, out)
	}
}

// Start starts the server and waits until it answers.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", s.port, s.dir)
	if out, err := s.pgctl("start", "-w", "-t", "60", "-l", s.dir+"/log", "-o", opts); err != nil {
		log, _ := os.ReadFile(s.dir + "/log")
		t.Fatalf("pg_ctl start: %v: %s\n%s", err, out, log)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", s.port))
		cancel()
		if err == nil {
			c.Close(context.Background())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the private PostgreSQL server does not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) pgctl(args ...string) ([]byte, error) {
	return s.command("pg_ctl", append([]string{"-D", s.dir + "/data"}, args...)...).CombinedOutput()
}

func (s *Server) asPostgres(t testing.TB, prog string, args ...string) {
	t.Helper()
	if out, err := s.command(prog, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", prog, err, out)
	}
}

// command runs one of the server's programs as the postgres user (the
// server refuses to run as root).
func (s *Server) command(prog string, args ...string) *exec.Cmd {
	return exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(s.bin, prog)}, args...)...)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
