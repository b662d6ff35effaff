//go:build !linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// child is CMD of `lock NAME -- CMD`, run directly: without Linux's
// parent-death signal, a CMD whose bqclient is killed with SIGKILL keeps
// running, and only the fencing token protects the resource then (README).
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// superviseArg is unused off Linux.
const superviseArg = "__supervise"

func supervise([]string) int { return exitUsage }

func startChild(argv []string, env []string, grace time.Duration) (*child, error) {
	c := &child{cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
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

func (c *child) signal(s syscall.Signal) { _ = c.cmd.Process.Signal(s) }

func (c *child) exitCode() int {
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		if code := ee.ExitCode(); code >= 0 {
			return code
		}
		return 128 + int(syscall.SIGTERM)
	}
	if c.err != nil {
		return exitError
	}
	return exitOK
}
