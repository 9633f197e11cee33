// Rssspawn runs a command and writes its peak resident memory (getrusage's
// ru_maxrss, in KiB on Linux) to a file, for brokertest.PeakRSS:
//
//	rssspawn REPORT COMMAND [ARG...]
//
// It exists because ru_maxrss is not the command's own when a large process
// starts it: Go starts children with clone(CLONE_VM|CLONE_VFORK), and at
// exec the kernel carries the parent's high-water RSS over into the child's
// (exec_mmap: setmax_mm_hiwater_rss). The benchmark's process holds the
// setup of 100,000 messages; this one holds nothing, so the figure is the
// command's, or at worst this program's few MiB (the benchmark measures
// that floor too). stdin, stdout and stderr are the command's; the exit
// status is the command's.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: rssspawn REPORT COMMAND [ARG...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[2], os.Args[3:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		fmt.Fprintln(os.Stderr, "rssspawn:", err)
		os.Exit(127)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		fmt.Fprintln(os.Stderr, "rssspawn: no rusage on this platform")
		os.Exit(127)
	}
	if err := os.WriteFile(os.Args[1], fmt.Appendf(nil, "%d\n", ru.Maxrss), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "rssspawn:", err)
		os.Exit(127)
	}
	os.Exit(cmd.ProcessState.ExitCode())
}
