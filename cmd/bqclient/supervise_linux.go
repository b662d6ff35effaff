package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// superviseArg is the hidden first argument of bqclient's supervisor
// process (child_linux.go): `bqclient __supervise GRACE -- CMD ARGS...`.
const superviseArg = "__supervise"

// supervise runs CMD in a process group of its own and stays its parent:
//   - a SIGTERM while bqclient lives (the lock was lost, or bqclient was told
//     to stop) goes to CMD's group, and SIGKILL follows after GRACE;
//   - a SIGTERM after bqclient died is the parent-death signal: nothing holds
//     the lock for CMD any more, so its group gets SIGKILL at once;
//   - SIGINT and SIGHUP go to CMD's group as they are;
//   - when CMD ends, what it left running in its group gets SIGTERM, and the
//     supervisor exits with CMD's code (128+N for a signal N).
//
// On a terminal where bqclient runs in the foreground, CMD's group gets the
// terminal (so it can read it and gets Ctrl-C), and bqclient's gets it back.
func supervise(args []string) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	signal.Ignore(syscall.SIGTTOU) // to hand the terminal back from the background
	parent := os.Getppid()
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "bqclient: __supervise is bqclient's own: it runs the command of `lock NAME -- CMD`")
		return exitUsage
	}
	grace, err := time.ParseDuration(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bqclient: __supervise:", err)
		return exitUsage
	}
	argv := args[2:]
	if parent == 1 {
		return 128 + int(syscall.SIGKILL) // bqclient is gone already: do not start CMD
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fg, tty := foreground(parent)
	if tty >= 0 {
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, tty
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "bqclient: cannot run %s: %v\n", argv[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127
		}
		return 126
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if os.Getppid() != parent { // bqclient died while CMD started
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	var kill <-chan time.Time
	for {
		select {
		case err := <-done:
			_ = syscall.Kill(-pgid, syscall.SIGTERM) // what CMD left behind
			if tty >= 0 {
				_ = unix.IoctlSetPointerInt(tty, unix.TIOCSPGRP, fg)
			}
			return childCode(err)
		case s := <-sigs:
			sig := s.(syscall.Signal)
			switch {
			case os.Getppid() != parent:
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			case sig == syscall.SIGTERM:
				_ = syscall.Kill(-pgid, syscall.SIGTERM)
				if kill == nil {
					kill = time.After(grace)
				}
			default:
				_ = syscall.Kill(-pgid, sig)
			}
		case <-kill:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
}

// foreground returns the terminal on stdin and its foreground process group
// if bqclient (parent) runs in the foreground of it; tty < 0 otherwise.
func foreground(parent int) (fg, tty int) {
	fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	if err != nil {
		return 0, -1
	}
	if pg, err := syscall.Getpgid(parent); err != nil || pg != fg {
		return 0, -1
	}
	return fg, 0
}

// childCode is the exit code of a finished CMD: its own, or 128+N.
func childCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		return exitError
	}
	return exitOK
}
