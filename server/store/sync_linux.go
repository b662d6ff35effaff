//go:build linux

package store

import (
	"errors"
	"os"
	"syscall"
)

// fdatasync flushes f's data, and only the metadata needed to read it
// back, to stable storage. The WAL never changes size, so that is one
// device flush with no journal commit.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if !errors.Is(serr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}
