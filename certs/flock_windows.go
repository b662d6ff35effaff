package certs

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockRange is where the one locked byte is: at 2^62, far past the end of
// any file it is used on. Byte-range locks are mandatory on Windows (a locked
// byte can be neither read nor written through another handle), so locking a
// byte no one reads leaves the contents readable and writable, as with flock
// on Unix. The offset goes in the OVERLAPPED, in two 32-bit halves.
func lockRange() *windows.Overlapped { return &windows.Overlapped{Offset: 0, OffsetHigh: 1 << 30} }

func tryLockFile(f *os.File) (bool, error) {
	err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, lockRange())
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return false, nil
	}
	return err == nil, err
}

func unlockFile(f *os.File) error {
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, lockRange())
}
