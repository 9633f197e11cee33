package postgres

import (
	"syscall"
	"time"
)

// tcpUserTimeout is Linux's TCP_USER_TIMEOUT (the syscall package names it
// on some architectures only).
const tcpUserTimeout = 0x12

// setUserTimeout makes a TCP connection fail when data it sent stays
// unacknowledged for d (and, with keepalive, when probes go unanswered that
// long), instead of after TCP's many minutes of retransmissions.
func setUserTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		if network != "tcp" && network != "tcp4" && network != "tcp6" {
			return nil
		}
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d.Milliseconds()))
		})
		if err != nil {
			return err
		}
		return serr
	}
}
