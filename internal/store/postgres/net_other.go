//go:build !linux

package postgres

import (
	"syscall"
	"time"
)

// setUserTimeout does nothing where there is no TCP_USER_TIMEOUT; keepalive
// alone bounds the wait.
func setUserTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
