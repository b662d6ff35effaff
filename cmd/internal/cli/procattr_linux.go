package cli

import (
	"os/exec"
	"runtime"
	"syscall"
)

// StartTiedToParent starts cmd so that the kernel sends it sig the moment
// this process dies, however it dies (kill -9 included): a parent-death
// signal (prctl PR_SET_PDEATHSIG). The signal fires when the thread that
// forked the child exits, not the process, so the fork happens on a thread
// kept for the child's whole life (golang.org/issue/27505). done is closed,
// with the child's Wait error in *waitErr, when it has exited.
func StartTiedToParent(cmd *exec.Cmd, sig syscall.Signal, waitErr *error) (done <-chan struct{}, err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
	started := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		*waitErr = cmd.Wait()
		close(ended)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return ended, nil
}

// TiedToParent says whether StartTiedToParent ties a child's life to ours.
const TiedToParent = true
