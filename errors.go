package bq

import (
	"errors"

	"github.com/bq-lock/bq/bakery"
)

// Errors returned by the client. Test with errors.Is.
var (
	// ErrBusy: TryLock found someone ahead.
	ErrBusy = errors.New("bq: lock is busy")
	// ErrLockLost: the holding ended because the lease guarantee failed.
	ErrLockLost = errors.New("bq: lock lost (lease guarantee failed)")
	// ErrTimeout: the context ended before the operation completed.
	ErrTimeout = errors.New("bq: timed out")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("bq: client closed")
	// ErrNotHeld: Unlock of a lock this client does not hold.
	ErrNotHeld = errors.New("bq: lock not held")
	// ErrUnavailable: too few servers answer to form a quorum.
	ErrUnavailable = errors.New("bq: cluster unavailable")
	// ErrIdentityInUse: another process of this machine has the identity
	// open. One identity is one client with one session at a time: give
	// each process its own identity file.
	ErrIdentityInUse = errors.New("bq: identity in use by another process")
)

func mapBakeryErr(err error) error {
	switch {
	case errors.Is(err, bakery.ErrBusy):
		return ErrBusy
	case errors.Is(err, bakery.ErrLeaseLost):
		return errors.Join(ErrLockLost, err)
	}
	return err
}
