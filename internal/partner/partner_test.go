package partner

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestPostIsNeverSilentlyRetried: net/http re-sends an "idempotent"
// request (a POST with Idempotency-Key counts) when a reused connection
// breaks. The partner would see calls nobody counted. This partner answers
// the first request on a connection and closes the second unanswered.
func TestPostIsNeverSilentlyRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var requests atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					requests.Add(1)
					if n == 1 {
						return // the reused connection breaks: no answer
					}
					fmt.Fprintf(conn, "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}")
				}
			}()
		}
	}()
	p := New("http://"+ln.Addr().String()+"/v1/claims", 1, 5*time.Second)
	if a := p.Post(context.Background(), []byte(`{}`), "application/json", "k1", ""); a.Status != 201 {
		t.Fatalf("first: %+v", a)
	}
	a := p.Post(context.Background(), []byte(`{}`), "application/json", "k2", "")
	if a.Err == nil {
		t.Fatalf("second: %+v, want the broken connection as an error", a)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("the partner saw %d requests for 2 calls: a silent retry", n)
	}
}
