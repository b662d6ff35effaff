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

// Gauges summarises the core's current state for metrics: locks with a
// non-empty active set, members over all of them, the largest set, clients
// suspected and clients banned.
func (k *Core) Gauges() (locks, members, maxMembers, suspected, banned int) {
	for _, l := range k.locks {
		if n := l.MemberCount(); n > 0 {
			locks++
			members += n
			maxMembers = max(maxMembers, n)
		}
	}
	return locks, members, maxMembers, len(k.mute.Suspects()), len(k.banned)
}
