package detector

import (
	"sort"
	"time"

	"github.com/bq-lock/bq/wire"
)

// Max-hold (docs/protocol.md change 24). The core decides when a client's
// hold clock on a lock starts (its Held, or HeldDeadline after its Ticket
// was first the lock's least) and stops; the detector keeps the clocks and,
// when one passes its client's max-hold, refuses the session's lease, which
// is voted on when it runs out — the path of an overrun Doorway.

// hold is a running hold clock.
// INVARIANT: limit ≥ 0; a clock with limit 0 cuts nothing until
// SetHoldLimit gives it one (a restarted server learns a client's
// certificate only when the client connects again).
type hold struct {
	session uint64
	since   time.Time
	limit   time.Duration
}

// HoldStarted starts the hold clock of c on lock for session sess at since,
// with c's max-hold limit; a limit of zero starts a clock that cuts nothing
// until SetHoldLimit bounds it. A clock already running for the same
// session keeps its start.
func (m *Muteness) HoldStarted(c wire.ClientID, lock string, sess uint64, since time.Time, limit time.Duration) {
	cs := m.client(c)
	if h, ok := cs.holds[lock]; ok && h.session == sess {
		return
	}
	if sess <= cs.resetUpTo {
		delete(cs.holds, lock)
		return
	}
	cs.holds[lock] = hold{session: sess, since: since, limit: max(limit, 0)}
}

// HoldEnded stops c's hold clock on lock (its Exit, a newer attempt, a reset).
func (m *Muteness) HoldEnded(c wire.ClientID, lock string) {
	if cs := m.clients[c]; cs != nil {
		delete(cs.holds, lock)
	}
}

// SetHoldLimit changes c's max-hold for the clocks running (the client
// connected with a certificate that names another), from their start;
// zero leaves them running without a bound.
func (m *Muteness) SetHoldLimit(c wire.ClientID, limit time.Duration) {
	cs := m.clients[c]
	if cs == nil {
		return
	}
	for lock, h := range cs.holds {
		h.limit = max(limit, 0)
		cs.holds[lock] = h
	}
}

// Holding reports whether c's hold clock on lock runs, and since when.
func (m *Muteness) Holding(c wire.ClientID, lock string) (since time.Time, ok bool) {
	if cs := m.clients[c]; cs != nil {
		h, ok := cs.holds[lock]
		return h.since, ok
	}
	return time.Time{}, false
}

// tickHolds refuses the session of every hold clock of cs that ran past
// its limit at now.
func (m *Muteness) tickHolds(cs *clientState, now time.Time) {
	if len(cs.holds) == 0 {
		return
	}
	locks := make([]string, 0, len(cs.holds))
	for lock := range cs.holds {
		locks = append(locks, lock)
	}
	sort.Strings(locks)
	for _, lock := range locks {
		h := cs.holds[lock]
		if h.limit == 0 || now.Sub(h.since) < h.limit {
			continue
		}
		delete(cs.holds, lock)
		// The vote says "mute": the lease ran out unrenewed. A reason of
		// its own would be refused by servers of an older minor version.
		m.refuseLease(cs, h.session, wire.SuspectMute, now)
	}
}
