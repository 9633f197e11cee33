package claimsys

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// Endpoint serves a Server on one fixed address and can take it down and
// bring it back on the same address, as a partner outage looks from the
// consumer: while down, a new connection is refused by the kernel, and a
// call on a connection that was already open is cut off unanswered and
// not counted. A call already past its decision when Down is called is
// answered as usual, so an outage never turns an accepted claim into an
// unanswered one (which would make the retry a duplicate).
type Endpoint struct {
	s    *Server
	addr string

	mu  sync.Mutex
	srv *http.Server
}

// Serve listens on addr (127.0.0.1:0 picks a port, kept across Down/Up).
func Serve(s *Server, addr string) (*Endpoint, error) {
	e := &Endpoint{s: s, addr: addr}
	if err := e.Up(); err != nil {
		return nil, err
	}
	return e, nil
}

// URL is the base URL (http://host:port).
func (e *Endpoint) URL() string { return "http://" + e.addr }

// Up listens again (after Down) and lets calls through.
func (e *Endpoint) Up() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv != nil {
		return nil
	}
	l, err := net.Listen("tcp", e.addr)
	if err != nil {
		return fmt.Errorf("claim system: listen %s: %w", e.addr, err)
	}
	e.addr = l.Addr().String()
	e.s.mu.Lock()
	e.s.down = false
	e.s.mu.Unlock()
	e.srv = &http.Server{Handler: e.s}
	go e.srv.Serve(l)
	return nil
}

// Down stops listening: connections are refused until Up. Calls arriving
// on connections already open are cut off, uncounted.
func (e *Endpoint) Down() {
	e.s.mu.Lock()
	e.s.down = true
	e.s.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv != nil {
		// Close the listener; SetKeepAlivesEnabled(false) closes the idle
		// connections. Busy ones finish their call (cut off if it had not
		// decided yet) and then close.
		e.srv.SetKeepAlivesEnabled(false)
		e.srv.Shutdown(closedContext())
		e.srv = nil
	}
}

// Close takes it down for good.
func (e *Endpoint) Close() {
	e.Down()
	e.s.Release()
}

// closedContext makes Shutdown close the listener and the idle
// connections and return at once, without waiting for the busy ones.
func closedContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
