package brokertest

import (
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Frame is one AMQP frame the client sent, as a FilterClient sees it.
type Frame struct {
	Type    byte // 1 method, 2 header, 3 body, 8 heartbeat
	Channel uint16
	Payload []byte
}

// Method is a method frame's class and method ids (0, 0 for other frames).
func (f Frame) Method() (class, method uint16) {
	if f.Type != 1 || len(f.Payload) < 4 {
		return 0, 0
	}
	return binary.BigEndian.Uint16(f.Payload), binary.BigEndian.Uint16(f.Payload[2:])
}

// FilterClient stands between a client and the real broker of rawURL (a
// network fault, not a stand-in: every byte the client gets comes from
// the broker). The broker's bytes all pass; of the client's frames, those
// drop returns true for never reach the broker. It returns the URL to give
// the client, and closes everything when the test ends.
func FilterClient(t testing.TB, rawURL string, drop func(Frame) bool) string {
	t.Helper()
	return proxy(t, rawURL, drop, nil)
}

// FreezeOnPublish stands between a client and the real broker of rawURL
// and passes everything until the client's first basic.publish; from then
// on it reads nothing more from the client (its writes block once the
// socket's buffers are full) and passes nothing more of the broker's (no
// heartbeat reaches the client, whose library gives the connection up
// after three missed ones): a node that froze mid-batch. The channel it
// returns is closed when the freeze began (the fault has really happened).
func FreezeOnPublish(t testing.TB, rawURL string) (string, <-chan struct{}) {
	t.Helper()
	frozen, ended := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(ended) })
	var once sync.Once
	u := proxy(t, rawURL, func(f Frame) bool {
		if class, method := f.Method(); class == 60 && method == 40 {
			once.Do(func() { close(frozen) })
		}
		select {
		case <-frozen:
			<-ended // read no more from the client
			return true
		default:
			return false
		}
	}, frozen)
	return u, frozen
}

// proxy is FilterClient's, and FreezeOnPublish's when gate is not nil: the
// broker's bytes stop passing once gate is closed.
func proxy(t testing.TB, rawURL string, drop func(Frame) bool, gate <-chan struct{}) string {
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
			go func() {
				if gate == nil {
					defer client.Close()
					io.Copy(client, server)
					return
				}
				buf := make([]byte, 32<<10)
				for {
					n, err := server.Read(buf)
					select {
					case <-gate:
						// Read and dropped; and when the broker gives the
						// connection up (the client's heartbeats stopped
						// with the rest), the client's socket stays open
						// and silent until the test ends.
						n = 0
					default:
					}
					if n > 0 {
						if _, werr := client.Write(buf[:n]); werr != nil {
							client.Close()
							return
						}
					}
					if err != nil {
						select {
						case <-gate:
						default:
							client.Close()
						}
						return
					}
				}
			}()
			go func() {
				defer server.Close()
				copyFrames(client, server, drop)
			}()
		}
	}()
	u.Host = l.Addr().String()
	return u.String()
}

// copyFrames copies the client's protocol header, then each frame drop
// lets through, to the server.
func copyFrames(client io.Reader, server io.Writer, drop func(Frame) bool) {
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
		if drop(Frame{Type: head[0], Channel: binary.BigEndian.Uint16(head[1:3]), Payload: frame[7 : len(frame)-1]}) {
			continue
		}
		if _, err := server.Write(frame); err != nil {
			return
		}
	}
}

// StallAfterHandshake is a FilterClient that passes the handshake and the
// heartbeats (channel 0) and drops every frame the client sends on a
// channel, from channel.open on: a node that took the connection and then
// stalls, paused or cut off from its cluster, while its heartbeats keep
// the connection alive. The channel it returns is closed once a frame has
// been dropped (the fault has really happened).
func StallAfterHandshake(t testing.TB, rawURL string) (string, <-chan struct{}) {
	t.Helper()
	stalled := make(chan struct{})
	var once sync.Once
	u := FilterClient(t, rawURL, func(f Frame) bool {
		if f.Channel == 0 {
			return false
		}
		once.Do(func() { close(stalled) })
		return true
	})
	return u, stalled
}
