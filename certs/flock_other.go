//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd || solaris || windows)

package certs

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// Without a file lock an identity cannot be kept to one process, so bq
// refuses to open one rather than risk two sessions of it at once.
func tryLockFile(*os.File) (bool, error) {
	return false, fmt.Errorf("file locks are not available on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

func unlockFile(*os.File) error { return nil }
