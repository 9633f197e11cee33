package brokertest

import (
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// StallAfterHandshake stands between a client and the real broker of
// rawURL (a fault, not a stand-in: every byte comes from the broker). It
// passes the AMQP handshake and the heartbeats through, both ways, and
// from the client's first frame on a channel (channel.open) on it drops
// every frame the client sends on one: the way a node behaves that took
// the connection and then stalls, paused or cut off from its cluster,
// while its heartbeats keep the connection alive. It returns the URL to
// give the client and a channel closed once a frame has been dropped (the
// fault has really happened). It closes everything when the test ends.
func StallAfterHandshake(t testing.TB, rawURL string) (string, <-chan struct{}) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stalled := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, server)
			mu.Unlock()
			go io.Copy(client, server)
			go func() {
				defer server.Close()
				dropChannelFrames(client, server, func() { once.Do(func() { close(stalled) }) })
			}()
		}
	}()
	u.Host = l.Addr().String()
	return u.String(), stalled
}

// dropChannelFrames copies the client's protocol header and its frames on
// channel 0 (connection methods and heartbeats) to the server, and drops
// the rest, calling dropped for each.
func dropChannelFrames(client io.Reader, server io.Writer, dropped func()) {
	header := make([]byte, 8) // "AMQP" 0 0 9 1
	if _, err := io.ReadFull(client, header); err != nil {
		return
	}
	if _, err := server.Write(header); err != nil {
		return
	}
	for {
		head := make([]byte, 7) // type, channel, size
		if _, err := io.ReadFull(client, head); err != nil {
			return
		}
		frame := make([]byte, 7+int(binary.BigEndian.Uint32(head[3:]))+1) // payload and frame-end
		copy(frame, head)
		if _, err := io.ReadFull(client, frame[7:]); err != nil {
			return
		}
		if binary.BigEndian.Uint16(head[1:3]) != 0 {
			dropped()
			continue
		}
		if _, err := server.Write(frame); err != nil {
			return
		}
	}
}
