package core

import "github.com/bq-lock/bq/internal/wire"

// Read-only views of the core's state, for status pages and the simulator's
// invariant checkers (test/sim). They never change anything.

// ResetUpTo is the highest session of client c this server knows to be
// reset by a certificate (0 if none).
func (k *Core) ResetUpTo(c wire.ClientID) uint64 { return k.mute.ResetUpTo(c) }

// Register returns client c's register value for lock as this server holds
// it (nil if none), and whether a reset certificate voids it.
func (k *Core) Register(lock string, c wire.ClientID) (st *wire.Statement, void bool) {
	l := k.locks[lock]
	if l == nil {
		return nil, false
	}
	en := l.Highest(c)
	if en == nil {
		return nil, false
	}
	return en.St, en.Void
}
