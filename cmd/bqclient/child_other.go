//go:build !linux && !windows

package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// child is CMD of `lock NAME -- CMD`, run directly (macOS, the BSDs):
// signals go to CMD alone, not to a process group, and SIGTERM is followed
// by SIGKILL after the grace if CMD is still running. Without Linux's
// parent-death signal, a CMD whose bqclient is killed with SIGKILL keeps
// running, and only the fencing token protects the resource then (README).
type child struct {
	cmd   *exec.Cmd
	done  chan struct{}
	err   error
	grace time.Duration
	term  bool // SIGTERM sent, SIGKILL on its way
}

// superviseArg is unused off Linux.
const superviseArg = "__supervise"

func supervise([]string) int { return exitUsage }

func startChild(argv []string, env []string, grace time.Duration) (*child, error) {
	c := &child{cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{}), grace: grace}
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.cmd.Env = env
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// signal sends s to CMD; after a SIGTERM, CMD gets SIGKILL once the grace
// is over, as the Linux supervisor does.
func (c *child) signal(s syscall.Signal) {
	_ = c.cmd.Process.Signal(s)
	if s != syscall.SIGTERM || c.term {
		return
	}
	c.term = true
	go func() {
		select {
		case <-c.done:
		case <-time.After(c.grace):
			_ = c.cmd.Process.Kill()
		}
	}()
}

// exitCode is CMD's exit code, 128+N if a signal N ended it.
func (c *child) exitCode() int {
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if c.err != nil {
		return exitError
	}
	return exitOK
}
