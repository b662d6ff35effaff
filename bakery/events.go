package bakery

import (
	"errors"
	"fmt"

	"github.com/bq-lock/bq/wire"
)

// EventKind says what happened to an operation.
type EventKind uint8

// The kinds of Event.
const (
	// Acquired: the lock is held (Token set). Servers are told with Held, asynchronously.
	Acquired EventKind = iota + 1
	// Released: Exit reached q servers (Unlock or Abandon is complete) — or,
	// for an attempt already exiting when the lease guarantee failed, its
	// session was abandoned: the servers reset it, which voids the attempt.
	Released
	// Lost: a held lock's lease guarantee failed (§5); the holding is over.
	Lost
	// Failed: an attempt ended without the lock (Err says why: ErrBusy for TryLock, ErrLeaseLost, ...).
	Failed
	// ReadDone: a register read finished (Statement set, nil if the register is empty or void).
	ReadDone
	// SetDone: a getSet finished (Set set).
	SetDone
	// Ticketed: SET-TICKET completed (q servers hold the Ticket; Token set). Informational:
	// first come first served is defined from this instant (§3, the bakery's doorway).
	Ticketed
)

func (k EventKind) String() string {
	return [...]string{"?", "acquired", "released", "lost", "failed", "read-done", "set-done", "ticketed"}[k]
}

// Event reports the end of an operation.
type Event struct {
	Kind      EventKind
	Lock      string
	Attempt   uint64
	Token     Token
	Err       error
	Op        uint64 // Read / GetSet operation id
	Statement *wire.Statement
	Set       []wire.ClientID
	// Ahead, for a TryLock that failed with ErrBusy: the members ahead.
	Ahead []Ahead
}

func (e Event) String() string {
	switch e.Kind {
	case Acquired:
		return fmt.Sprintf("acquired(%s att=%d token=%s)", e.Lock, e.Attempt, e.Token)
	case Failed, Lost:
		return fmt.Sprintf("%s(%s att=%d: %v)", e.Kind, e.Lock, e.Attempt, e.Err)
	}
	return fmt.Sprintf("%s(%s att=%d op=%d)", e.Kind, e.Lock, e.Attempt, e.Op)
}

// Errors reported in events.
var (
	ErrBusy      = errors.New("bakery: the lock is held or wanted by someone ahead")
	ErrLeaseLost = errors.New("bakery: the session's lease guarantee failed")
	ErrAbandoned = errors.New("bakery: the attempt was abandoned")
	// ErrMaxHold: the lock was held for the max-hold the servers apply
	// (docs/protocol.md change 24); the client gave it up, with a margin,
	// before they would refuse its lease.
	ErrMaxHold = errors.New("bakery: held for the max-hold the servers apply")
	// ErrRefused: so many servers refused a request for what it asks (a
	// limit, a lease TTL out of bounds, a ban) that fewer than q are left to
	// answer it; the attempt (or the session) fails at once instead of
	// waiting as if the cluster were down. It takes n−q+1 servers, so at
	// least one correct one: a faulty server cannot make a request fail.
	ErrRefused = errors.New("bakery: refused by the servers")
	// ErrListenRefused: so many servers refused a LISTEN (a limit, a ban)
	// that fewer than q are left to report; the attempt fails at once. It
	// is an ErrRefused.
	ErrListenRefused = fmt.Errorf("%w: listen refused", ErrRefused)
	// ErrNotPermitted: the refusal that made the request hopeless was the
	// cluster's permissions (a lock name outside the identity's
	// certificate, a revoked identity: docs/protocol.md change 23). It is
	// an ErrRefused.
	ErrNotPermitted = fmt.Errorf("%w: not permitted", ErrRefused)
)

// Send is one message to one server.
type Send struct {
	To  wire.ServerID
	Msg *wire.Message
}

// Effects is what a client step asks the runtime to do.
type Effects struct {
	Send   []Send
	Events []Event
}

// Stats counts quorum accesses (the paper's §5.1 claim is tested on them).
type Stats struct {
	Accesses map[string]uint64 // doorway, ticket, listen, exit, read, getset
	// EpochMoves counts the moves to a newer epoch (change 43).
	EpochMoves uint64
	// Unheld counts the Listens renewed without Hold because q released
	// reports left the attempt blocked (change 61).
	Unheld uint64
	// NumberingSkips counts the times the session source skipped past a
	// number the servers showed this client had used (change 67).
	NumberingSkips uint64
}
