package main

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/cmd/internal/cli"
)

// Exit codes. A command run under a lock (lock NAME -- CMD) exits with
// CMD's own code instead, whatever it is.
const (
	exitOK          = 0
	exitError       = 1 // anything not below: a bad file, a full disk, a bug
	exitUsage       = 2 // a mistake on the command line
	exitBusy        = 3 // the lock is held (--try), or the timeout passed while someone held it; elect --leader: no leader
	exitLost        = 4 // the lock (or lead) was lost while held: the lease guarantee failed, or its max-hold came
	exitUnavailable = 5 // fewer than a quorum of servers answered
	exitRefused     = 6 // the servers refused the request (a TTL out of their bounds, a limit, a ban)
	// exitNotPermitted: a closed cluster does not let this identity do it:
	// not enrolled, expired, revoked, or a lock name outside its patterns.
	exitNotPermitted = 7
	// exitIdentityBusy: another bqclient process of this machine uses the
	// identity (one identity, one process at a time): nothing was tried,
	// whatever the lock's state (issue 55).
	exitIdentityBusy = 8
)

const exitCodesHelp = `
Exit codes:
  0  ok
  1  error
  2  usage: a mistake on the command line
  3  busy: the lock is held (--try), or --timeout passed while someone held it;
     elect --leader: the election has no leader
  4  lock (or lead) lost while holding: the lease guarantee failed (cut off from the servers, or
     the identity revoked: the line says which) or the max-hold came (CMD got SIGTERM)
  5  cluster unavailable: fewer than a quorum of servers answered
  6  refused by the servers (a TTL out of their bounds, a limit, a ban)
  7  not permitted: the cluster is closed and this identity is not enrolled, its
     certificate expired, it was revoked, or the lock name is outside its patterns
  8  identity busy: another bqclient process of this machine uses this identity
     (--try, or --timeout passed waiting for it); the lock was not tried
  128+N  ended by signal N while waiting
  lock NAME -- CMD and elect NAME VALUE -- CMD exit with CMD's own code once it ran.
`

// failure ends a command with an exit code and one line for stderr.
type failure = cli.Exit

// fail maps err to its exit code and message.
func fail(err error) error {
	if err == nil {
		return nil
	}
	var f *cli.Exit
	var u *cli.UsageError
	if errors.As(err, &f) || errors.As(err, &u) {
		return err
	}
	code := exitError
	switch {
	case errors.Is(err, bq.ErrNotPermitted):
		code = exitNotPermitted
	case errors.Is(err, bq.ErrRefused):
		code = exitRefused
	case errors.Is(err, bq.ErrUnavailable):
		code = exitUnavailable
	case errors.Is(err, bq.ErrLockLost):
		code = exitLost
	case errors.Is(err, bq.ErrBusy), errors.Is(err, bq.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		code = exitBusy
	}
	var sig signalled
	if errors.As(err, &sig) {
		code = 128 + int(sig.sig)
	}
	return &failure{Code: code, Msg: trimBQ(err.Error())}
}

// signalled is the cause of a context a signal ended.
type signalled struct{ sig syscall.Signal }

func (s signalled) Error() string { return fmt.Sprintf("interrupted by %v", s.sig) }
