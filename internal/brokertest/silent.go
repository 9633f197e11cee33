package brokertest

import (
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// SilentBroker listens on a loopback port, accepts TCP connections and
// never says a word: an AMQP handshake with it waits for its whole timeout,
// the way a hung or firewalled broker behaves. It returns an amqp:// URL
// for it and a channel that receives when a connection is accepted (so the
// test knows the program is in its handshake, past installing its signal
// handler). It closes everything when the test ends.
func SilentBroker(t testing.TB) (url string, accepted <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	c := make(chan struct{}, 1)
	go func() {
		var held []net.Conn
		defer func() {
			for _, conn := range held {
				conn.Close()
			}
		}()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, conn)
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}()
	return "amqp://guest:guest@" + l.Addr().String() + "/x", c
}

// InterruptWhileConnecting starts cmd (a program whose EAI_AMQP_URL names
// a SilentBroker), waits until it is in its handshake, sends SIGINT, and
// returns how long it took to exit after the signal. It fails the test if
// the program never connects or is still running 5 s after the signal.
func InterruptWhileConnecting(t testing.TB, cmd *exec.Cmd, accepted <-chan struct{}) time.Duration {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	select {
	case <-accepted:
	case err := <-done:
		t.Fatalf("%s exited before it connected: %v", cmd.Path, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not connect within 10s", cmd.Path)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s still running 5s after SIGINT", cmd.Path)
	}
	return time.Since(sent)
}
