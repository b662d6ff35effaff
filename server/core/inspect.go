package core

import (
	"sort"

	"github.com/bq-lock/bq/wire"
)

// Read-only views of the core's state, for status pages and the simulator's
// invariant checkers (test/sim). They never change anything.

// ResetUpTo is the highest session of client c this server knows to be
// reset by a certificate (0 if none).
func (k *Core) ResetUpTo(c wire.ClientID) uint64 { return k.mute.ResetUpTo(c) }

// Register returns client c's register value for lock as this server holds
// it, or nil: none, or one a reset certificate voided and collected.
func (k *Core) Register(lock string, c wire.ClientID) *wire.Statement {
	l := k.locks[lock]
	if l == nil {
		return nil
	}
	en := l.Highest(c)
	if en == nil {
		return nil
	}
	return en.St
}

// Proclamation returns the proclamation this server keeps of client c on
// lock, or nil (for tests and the simulator: a leader's value reaches every
// member).
func (k *Core) Proclamation(lock string, c wire.ClientID) *wire.ProclamationBody {
	if jt, ok := k.justified[regKey{lock, c}]; ok && jt.proc != nil {
		return jt.proc.body
	}
	return nil
}

// LockCount is the number of locks this server keeps (for tests and the
// simulator's bounded-memory checker): a lock is kept while a client has
// a value or a subscription there, or once it has a hw.
func (k *Core) LockCount() int { return len(k.locks) }

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

// Footprint is what one server holds for one client (docs/protocol.md §6: every
// one of these is bounded by the configuration).
type Footprint struct {
	Locks         int // locks where the client has a register value or a subscription
	Subscriptions int // Listen and GetSet subscriptions, over all locks
	Watched       int // members watched by its Listens, over all locks
	MaxWatched    int // members watched by its largest Listen
	Sessions      int // live or suspected sessions
	Deferred      int // sessions whose votes wait for an older one to end
	PendingVotes  int // sessions with Suspect votes but no certificate
	// StateBytes, in Limits only, is the bound on the server's live state.
	StateBytes int
}

// ClientFootprint returns what this server holds for client c.
func (k *Core) ClientFootprint(c wire.ClientID) Footprint {
	var f Footprint
	for name := range k.clientLocks[c] {
		f.Locks++
		if l := k.locks[name]; l != nil {
			s, w := l.SubscriptionsOf(c)
			f.Subscriptions += s
			f.Watched += w
			f.MaxWatched = max(f.MaxWatched, w)
		}
	}
	f.Sessions, f.Deferred, f.PendingVotes = k.mute.Footprint(c)
	return f
}

// StateBytes returns the live state this server counts (change 25) and the
// same counted afresh; they must be equal (read only, for the simulator).
func (k *Core) StateBytes() (tracked, counted int) { return k.stateBytes, k.recountStateBytes() }

// Limits returns the configured bounds a Footprint must stay within
// (Subscriptions: per lock; MaxWatched: per Listen; StateBytes: the server's).
func (k *Core) Limits() Footprint {
	return Footprint{StateBytes: k.cfg.MaxStateBytes,
		Locks: k.cfg.MaxLocksPerClient, Subscriptions: 2, MaxWatched: k.listenCap,
		// Sessions heard of, and as many given back by a disk or a copy
		// (detector: restored leases do not count against the limit).
		Sessions: 2 * k.cfg.MaxSessionsPerClient, Deferred: k.cfg.MaxDeferredSessions, PendingVotes: 2 * k.cfg.MaxSessionsPerClient,
	}
}

// KnownClients lists every client this server holds anything for (register
// values, subscriptions, sessions), sorted.
func (k *Core) KnownClients() []wire.ClientID {
	seen := make(map[wire.ClientID]bool)
	for c := range k.clientLocks {
		seen[c] = true
	}
	out := make([]wire.ClientID, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}
