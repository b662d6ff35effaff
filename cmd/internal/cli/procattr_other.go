//go:build !linux

package cli

import (
	"os/exec"
	"syscall"
)

// StartTiedToParent starts cmd. Without Linux's parent-death signal the child
// outlives this process if it is killed with SIGKILL.
func StartTiedToParent(cmd *exec.Cmd, _ syscall.Signal, waitErr *error) (done <-chan struct{}, err error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ended := make(chan struct{})
	go func() {
		*waitErr = cmd.Wait()
		close(ended)
	}()
	return ended, nil
}

// TiedToParent says whether StartTiedToParent ties a child's life to ours.
const TiedToParent = false
