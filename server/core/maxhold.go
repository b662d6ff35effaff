package core

import (
	"sort"
	"time"

	"github.com/bq-lock/bq/wire"
)

// Max-hold (docs/protocol.md change 24). The core decides when a client's
// hold clock on a lock starts and stops; the detector runs the clocks and,
// past a client's max-hold, refuses the session's lease, which is voted on
// when it runs out, so the holding ends by the ordinary certificate.
//
// A clock starts at the earlier of the attempt's Held and HeldDeadline (the
// Doorway deadline) after this server's view first showed the attempt's
// Ticket as the lock's least: a client that enters and never says Held
// meets the second.

// leastTicket is the attempt whose Ticket this server's view shows as a
// lock's least, with no Held yet, and since when.
type leastTicket struct {
	client           wire.ClientID
	session, attempt uint64
	since            time.Time
	// started: its hold clock was started HeldDeadline after since.
	started bool
}

func (t leastTicket) is(st *wire.Statement) bool {
	return t.client == st.Client && t.session == st.Session && t.attempt == st.Attempt
}

// maxHoldOf is the max-hold this server applies to c: its certificate's,
// if it set one, else the configured default; zero is no bound.
func (k *Core) maxHoldOf(c wire.ClientID) time.Duration {
	if g := k.grants[c]; g != nil && g.MaxHoldMillis > 0 {
		return time.Duration(g.MaxHoldMillis) * time.Millisecond
	}
	return k.cfg.MaxHold
}

// noteHold follows c's new statement st on lock: a Held starts the hold
// clock now (unless the least-Ticket path started it already for the same
// attempt); any other phase ends it — a Ticket too, which begins an attempt
// whose clock cannot have started yet (a server that missed the Exit and
// Doorway before it must not count the last attempt's time).
// The lock's least Ticket is looked at again (settleHolds).
func (k *Core) noteHold(now time.Time, st *wire.Statement) {
	if st.Phase == wire.PhaseHeld {
		k.mute.HoldStarted(st.Client, st.Lock, st.Session, now, k.maxHoldOf(st.Client))
	} else {
		k.mute.HoldEnded(st.Client, st.Lock)
	}
	k.holdsDirty[st.Lock] = struct{}{}
}

// settleHolds looks again at the least Ticket of every lock that changed
// since the last call: a new one is noted with the time; one that is no
// longer least before its Held loses the clock it started.
func (k *Core) settleHolds(now time.Time) {
	for name := range k.holdsDirty {
		delete(k.holdsDirty, name)
		lock := k.locks[name]
		cur, had := k.leastTickets[name]
		var least *wire.Statement
		if lock != nil {
			if e := lock.LeastNumbered(); e != nil && e.St.Phase == wire.PhaseTicket {
				least = e.St
			}
		}
		if had && (least == nil || !cur.is(least)) {
			delete(k.leastTickets, name)
			if cur.started && !k.heldBy(name, cur) {
				k.mute.HoldEnded(cur.client, name)
			}
			had = false
		}
		if least != nil && !had {
			k.leastTickets[name] = leastTicket{client: least.Client, session: least.Session, attempt: least.Attempt, since: now}
		}
	}
}

// heldBy reports whether t's attempt said Held on lock name (so its clock
// runs on the Held and stays).
func (k *Core) heldBy(name string, t leastTicket) bool {
	lock := k.locks[name]
	if lock == nil {
		return false
	}
	e := lock.Highest(t.client)
	return e != nil && e.St.Phase == wire.PhaseHeld && e.St.Session == t.session && e.St.Attempt == t.attempt
}

// tickHolds starts the hold clock of every least Ticket that has waited
// HeldDeadline for its Held.
func (k *Core) tickHolds(now time.Time) {
	names := make([]string, 0, len(k.leastTickets))
	for name, t := range k.leastTickets {
		if !t.started && now.Sub(t.since) >= k.cfg.DoorwayDeadline {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		t := k.leastTickets[name]
		t.started = true
		k.leastTickets[name] = t
		k.mute.HoldStarted(t.client, name, t.session, t.since.Add(k.cfg.DoorwayDeadline), k.maxHoldOf(t.client))
	}
}
