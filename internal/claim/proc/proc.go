// Package proc names the holders of in-progress claims after their
// process, and tells from /proc whether a holder's process still runs:
// the one part of a claim's lifecycle that is not pure, kept out of
// package claim (whose rules take its answer as input: claim.Liveness).
package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// Holder names this holder of in-progress claims: host, pid and the
// process start time (so that a reused pid is not mistaken for it), and a
// number unique to each call (two stores in one process are two holders).
func Holder() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%s:%d", host, os.Getpid(), startTime(os.Getpid()), holderSeq.Add(1))
}

var holderSeq atomic.Int64

// Liveness is claim.Liveness read from /proc, for holders Holder named.
type Liveness struct{}

// Gone reports whether holder (as Holder names one) is a process on this
// host that no longer runs, so that its in-progress claims can be taken at
// once rather than after their lease (a consumer killed with -9 and
// started again). A holder on another host, or a name it cannot read, is
// not known to be gone.
func (Liveness) Gone(holder string) bool {
	parts := strings.Split(holder, ":")
	if len(parts) < 3 {
		return false
	}
	host, _ := os.Hostname()
	if parts[0] != host {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return false
	}
	return startTime(pid) != parts[2]
}

// startTime is field 22 of /proc/PID/stat (clock ticks since boot), or "".
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}
