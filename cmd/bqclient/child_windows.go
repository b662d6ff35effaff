package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// child is CMD of `lock NAME -- CMD` on Windows, run directly. Windows has
// neither signals to pass on nor process groups to send them to, so:
//   - Ctrl-C (SIGINT here) is not passed on: CMD shares bqclient's console
//     and has had the same Ctrl-C from it;
//   - anything that would send SIGTERM on Unix (the lock lost, the console
//     closed, a logoff or shutdown) kills CMD at once (TerminateProcess): no
//     grace, and processes CMD started are not killed with it;
//   - a CMD whose bqclient is killed keeps running, and only the fencing
//     token protects the resource then (README).
type child struct {
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	killed bool
}

// superviseArg is unused off Linux.
const superviseArg = "__supervise"

func supervise([]string) int { return exitUsage }

func startChild(argv []string, env []string, _ time.Duration) (*child, error) {
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

// signal kills CMD for any signal but SIGINT (see child).
func (c *child) signal(s syscall.Signal) {
	if s == syscall.SIGINT {
		return
	}
	c.killed = true
	_ = c.cmd.Process.Kill()
}

// exitCode is CMD's exit code, or 128+9 (as for SIGKILL) if bqclient killed it.
func (c *child) exitCode() int {
	var ee *exec.ExitError
	switch {
	case c.killed && errors.As(c.err, &ee):
		return 128 + int(syscall.SIGKILL)
	case errors.As(c.err, &ee):
		return ee.ExitCode()
	case c.err != nil:
		return exitError
	}
	return exitOK
}
