package store

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"syscall"
)

// Fail-stop (docs/protocol.md change 69, rule 5). A store that finds that
// its disk changed something (an IntegrityError), whose fdatasync fails, or
// whose write or read fails with anything but a lack of space, fails for
// good: from then on every Commit, Get, ForEach, Check and Scrub returns
// an error matching ErrFailed, the checkpointer stops, and Failed says
// why. A failed store writes nothing more to either file. A lack of space
// (ENOSPC, EDQUOT) on a write is no failure of the data: the write is
// refused and a later one may succeed (issue 36).

// ErrFailed is matched (errors.Is) by every error of a store that has
// failed for good, and by the error that made it fail. Once it is
// returned, nothing more is acknowledged: the caller must stop acting on
// the store (the server stops voting, signing and answering, and exits).
// An error of a Commit whose ops may nevertheless have reached the disk
// matches ErrUncertain too. An error found by the integrity checks matches
// ErrCorrupt as well, and errors.As finds its *IntegrityError.
var ErrFailed = errors.New("store: failed")

// failure is the error of a failed store: cause is what made it fail.
type failure struct {
	cause error
	// uncertain is set on the error of the one Commit whose ops were
	// written before the failure (its fdatasync failed): they may survive.
	uncertain bool
}

func (f *failure) Error() string {
	msg := strings.TrimPrefix(f.cause.Error(), "store: ")
	if f.uncertain {
		return "store: failed (commit outcome uncertain): " + msg
	}
	return "store: failed: " + msg
}

func (f *failure) Is(target error) bool {
	return target == ErrFailed || (f.uncertain && target == ErrUncertain)
}

func (f *failure) Unwrap() error { return f.cause }

// isNoSpace reports whether err is a write refused for lack of space, the
// one I/O error after which the store stays usable. It must come from a
// write (an *os.PathError of op "write", as os.File.WriteAt and bbolt's
// page writes return), never from an fdatasync: bbolt returns those as a
// bare errno, and a failed fdatasync is never retried, whatever its errno
// (the kernel may have dropped the pages). bbolt reports a failed grow of
// its file only as text ("file resize error: ...").
func isNoSpace(err error) bool {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Op == "write" {
		return errors.Is(pe.Err, syscall.ENOSPC) || errors.Is(pe.Err, syscall.EDQUOT)
	}
	if msg := err.Error(); strings.Contains(msg, "file resize error: ") {
		return strings.Contains(msg, syscall.ENOSPC.Error()) || strings.Contains(msg, syscall.EDQUOT.Error())
	}
	return false
}

// fail makes the store fail for good with cause, unless it has failed
// already, and returns the error for the operation that found it
// (uncertain: for a Commit whose ops were written). Later operations get
// Failed's error, which names the first cause.
func (s *Store) fail(cause error, uncertain bool) error {
	var f *failure
	if errors.As(cause, &f) {
		cause = f.cause
	}
	first := &failure{cause: cause}
	s.mu.Lock()
	if s.failure == nil {
		s.failure = first
		close(s.failed)
	} else {
		first = nil
	}
	s.mu.Unlock()
	if first != nil {
		s.log.Error("store: failed for good; nothing more is acknowledged", "err", cause)
	}
	return &failure{cause: cause, uncertain: uncertain}
}

// writeFailed is fail for the error of a write (a WAL record or a bbolt
// transaction): a lack of space is returned as it is, to be retried;
// anything else fails the store.
func (s *Store) writeFailed(err error) error {
	if isNoSpace(err) || errors.Is(err, ErrClosed) {
		return err
	}
	return s.fail(err, false)
}

// Failed returns nil while the store works, and once it has failed for
// good, an error matching ErrFailed that says why (the first cause: an
// *IntegrityError, matching ErrCorrupt too, or the failed fdatasync or I/O
// error). It stays set until the process ends; a new Open checks the
// files afresh.
func (s *Store) Failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure == nil {
		return nil
	}
	return s.failure
}

// FailedChan returns a channel that is closed when the store fails for
// good (Failed then says why): for a caller that must stop at once, not at
// its next call. It is never closed on a store that works, Close
// included.
func (s *Store) FailedChan() <-chan struct{} { return s.failed }

// readGuarded runs fn, which reads the bbolt file at file through its
// memory map, turning a fault (an I/O error under the map, or a damaged
// page pointing outside it) or a panic of bbolt on a damaged page into an
// IntegrityError. fn must not run code of the caller's: its panics would
// be taken for damage.
func readGuarded(file string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &IntegrityError{File: file, Reason: fmt.Sprintf("reading it failed: %v", r)}
		}
	}()
	return fn()
}
