package rabbitctl

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// killTree kills rabbitmqctl's process group and every descendant of pid.
// The group alone is not enough: run as root, the rabbitmqctl wrapper
// starts the Erlang VM through su, which puts it in a new session (so a
// new group). The descendants are found before anything is killed, since
// a killed parent's children are re-parented and can no longer be traced
// to it.
func killTree(pid int) error {
	desc := Descendants(pid)
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		err = nil
	}
	for _, d := range desc {
		_ = syscall.Kill(d, syscall.SIGKILL) // best effort: it may have exited already
	}
	return err
}

// Descendants returns the pids of the living descendants of pid, read from
// /proc (nil where there is no /proc). Zombies are left out: they hold
// nothing open and cannot be killed.
func Descendants(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	children := map[int][]int{}
	for _, f := range stats {
		p, ppid, state, ok := readStat(f)
		if ok && state != 'Z' && state != 'X' {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// readStat reads pid, parent pid and state from /proc/PID/stat. The
// command name, in parentheses, may itself hold spaces and parentheses,
// so the fields are read after its last ')'.
func readStat(path string) (pid, ppid int, state byte, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 2 || len(fields[0]) != 1 {
		return 0, 0, 0, false
	}
	pid, err1 := strconv.Atoi(string(bytes.Fields(b[:i])[0]))
	ppid, err2 := strconv.Atoi(string(fields[1]))
	if err1 != nil || err2 != nil {
		return 0, 0, 0, false
	}
	return pid, ppid, fields[0][0], true
}
