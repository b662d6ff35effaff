package activeset

import (
	"bytes"
	"slices"

	"github.com/bq-lock/bq/wire"
)

// Subscription is one client's listener on a lock: a GetSet (Watch == nil,
// the whole active set) or a Listen (the members in Watch).
// INVARIANT: Remaining > 0 while the subscription is registered; a client
// has at most one subscription of each kind (Listen, GetSet) per lock.
type Subscription struct {
	Client    wire.ClientID
	Req       uint64
	Watch     map[wire.ClientID]bool
	Remaining int
	// Settled, if set (a Listen), reports whether x's register value here
	// lets the subscriber pass x for good (§3.3; docs/protocol.md change 15):
	// x is described once more and then leaves Watch, so nothing x does
	// later is pushed to a client that can no longer act on it.
	Settled func(x wire.ClientID, e *Entry) bool
	// Hold (a Listen that asked for it, docs/protocol.md change 27) sends
	// one report instead of a snapshot and pushes: the server adds each
	// member that settles to held, and sends held once no watched member
	// blocks here (blocks).
	Hold bool
	// Frozen, if set (a held Listen), reports whether x's value here may
	// never change but by an Exit or a reset, because this server voted on
	// its session (docs/protocol.md change 42): such a member does not block.
	Frozen func(x wire.ClientID, e *Entry) bool
	// INVARIANT: held != nil exactly while a Hold subscription is
	// registered; it describes each member that left Watch, as it settled.
	held *wire.Update
	// blocker is the member blocks last found ahead here, tried first the
	// next time (a waiter's queue ahead of it rarely moves but at its head).
	// A hint only: blocks checks it as it checks any member.
	blocker wire.ClientID
}

// settle drops x from a Listen's Watch once its value here settles it.
func (l *Lock) settle(s *Subscription, x wire.ClientID) {
	if s.Settled != nil && s.Watch != nil && s.Settled(x, l.highest[x]) {
		delete(s.Watch, x)
	}
}

func (s *Subscription) watches(c wire.ClientID) bool { return s.Watch == nil || s.Watch[c] }

// subKey names a subscription: a client's Listen and its GetSet on one lock
// are separate, so reading the set never ends the client's own Listen.
type subKey struct {
	client wire.ClientID
	getSet bool
}

func (s *Subscription) key() subKey { return subKey{client: s.Client, getSet: s.Watch == nil} }

// CertFor returns the reset certificate that voids c's register value, if any.
type CertFor func(c wire.ClientID) *wire.ResetCertificate

// Push is one Update to send to a subscriber.
type Push struct {
	To     wire.ClientID
	Update *wire.Update
}

// Subscribe registers s (replacing the client's previous subscription of
// the same kind to this lock) and returns the snapshot to send. A subscription with
// Remaining ≤ 0 gets its snapshot only. A Listen with Hold gets nil (nothing
// to send yet) unless no member it watches blocks here already (held.go).
func (l *Lock) Subscribe(s *Subscription, certFor CertFor) *wire.Update {
	delete(l.subs, s.key())
	u := &wire.Update{Req: s.Req, Lock: l.Name, Seq: l.seq}
	if s.Hold && s.Watch != nil {
		return l.subscribeHeld(s, u, certFor)
	}
	if s.Watch == nil {
		u.Statements = Signed(l.Members())
	} else {
		for _, c := range sortedIDs(s.Watch) {
			l.describe(u, c, certFor, false)
			l.settle(s, c)
		}
	}
	if s.Remaining > 0 {
		l.subs[s.key()] = s
	} else {
		u.Last = true
	}
	return u
}

// describe adds c's current state to u: its statement if it is a member,
// else its absence with its Exit or, if it has none here, the certificate
// that reset it, if any (a certificate collects the values it voids). In a
// held report (held) an Exit or a voided value is named by the absence
// alone (docs/protocol.md change 61).
func (l *Lock) describe(u *wire.Update, c wire.ClientID, certFor CertFor, held bool) {
	e := l.highest[c]
	if e.Active() {
		u.Statements = append(u.Statements, e.Signed)
		return
	}
	u.Absent = append(u.Absent, c)
	if e != nil {
		// The Exit itself too: the listener takes the highest statement over
		// all reports (§3.3), so one correct server's Exit outranks a stale
		// Ticket that a server which missed the Exit still reports (test/sim).
		// A held report leaves it out: a client that q such reports leave
		// blocked listens again without Hold, and hears it then (change 61).
		if !held {
			u.Statements = append(u.Statements, e.Signed)
		}
		return
	}
	if certFor != nil {
		if cert := certFor(c); cert != nil {
			u.Resets = append(u.Resets, *cert)
		}
	}
}

// Unsubscribe drops c's subscriptions to the lock (its next statement for
// the lock ends them, §3).
func (l *Lock) Unsubscribe(c wire.ClientID) {
	delete(l.subs, subKey{client: c})
	delete(l.subs, subKey{client: c, getSet: true})
}

// UnsubscribeListen drops only c's Listen (a new Listen replaces it).
func (l *Lock) UnsubscribeListen(c wire.ClientID) { delete(l.subs, subKey{client: c}) }

// Subscribers is the number of live subscriptions.
func (l *Lock) Subscribers() int { return len(l.subs) }

// Changed returns the pushes owed to subscribers after c's register value
// changed (applied, voided or forgotten). Each push uses up one of the
// subscription's T; the last one is marked and ends it.
func (l *Lock) Changed(c wire.ClientID, certFor CertFor) []Push {
	return l.changed(c, certFor, true, false)
}

// ChangedByReset is Changed for a member that a reset certificate removed
// (its value collected, ForgetUpTo): each Listen is told (absent, with the
// certificate) and stops watching c, as a reset settles c for every
// listener (docs/protocol.md changes 15 and 22).
func (l *Lock) ChangedByReset(c wire.ClientID, certFor CertFor) []Push {
	return l.changed(c, certFor, true, true)
}

// ChangedNotListens is Changed for a change no waiting client can act on
// (a Held after its Ticket: the same N, so the same decision, §3.3): only
// GetSet subscribers are told; Listens are left alone and keep their T.
func (l *Lock) ChangedNotListens(c wire.ClientID, certFor CertFor) []Push {
	return l.changed(c, certFor, false, false)
}

func (l *Lock) changed(c wire.ClientID, certFor CertFor, listens, reset bool) []Push {
	var out []Push
	for _, s := range l.subsWatching(c, listens) {
		if s.held != nil {
			if u := l.heldChanged(s, c, certFor, reset); u != nil {
				out = append(out, Push{To: s.Client, Update: u})
			}
			continue
		}
		u := &wire.Update{Req: s.Req, Lock: l.Name, Seq: l.seq}
		l.describe(u, c, certFor, false)
		if reset && s.Watch != nil {
			delete(s.Watch, c)
		} else {
			l.settle(s, c)
		}
		s.Remaining--
		if s.Remaining <= 0 {
			u.Last = true
			delete(l.subs, s.key())
		}
		out = append(out, Push{To: s.Client, Update: u})
	}
	return out
}

// subsWatching is the subscriptions of clients other than c that watch c
// (GetSets only, unless listens), in the order of sortedSubs. Handling one
// changes no other's Watch, so filtering first is filtering as they come;
// and it leaves to sort only the few that watch a newcomer's Doorway or
// Ticket, where sorting all of them cost a server more than the rest of
// the walk (BenchmarkHandoffs64).
func (l *Lock) subsWatching(c wire.ClientID, listens bool) []*Subscription {
	var out []*Subscription
	for _, s := range l.subs {
		if s.Client != c && s.watches(c) && (listens || s.Watch == nil) {
			out = append(out, s)
		}
	}
	sortSubs(out)
	return out
}

func (l *Lock) sortedSubs() []*Subscription {
	out := make([]*Subscription, 0, len(l.subs))
	for _, s := range l.subs {
		out = append(out, s)
	}
	sortSubs(out)
	return out
}

// sortSubs orders subscriptions by client, a client's Listen before its
// GetSet: pushes go out in one order whatever the maps' (the simulator
// replays a seed exactly).
func sortSubs(ss []*Subscription) {
	slices.SortFunc(ss, func(a, b *Subscription) int {
		if c := bytes.Compare(a.Client[:], b.Client[:]); c != 0 {
			return c
		}
		switch {
		case a.Watch != nil && b.Watch == nil:
			return -1
		case a.Watch == nil && b.Watch != nil:
			return 1
		}
		return 0
	})
}

// SubscriptionsOf counts client c's subscriptions to this lock (at most two:
// a Listen and a GetSet) and the members its Listen watches (read only, for
// the simulator's bounded-memory checker).
func (l *Lock) SubscriptionsOf(c wire.ClientID) (subs, watched int) {
	for _, getSet := range []bool{false, true} {
		if s := l.subs[subKey{client: c, getSet: getSet}]; s != nil {
			subs++
			watched += len(s.Watch)
		}
	}
	return subs, watched
}

// EndAll removes every subscription and returns them, by client (a server
// that sealed its epoch answers none of them any more: change 43).
func (l *Lock) EndAll() []*Subscription {
	out := l.sortedSubs()
	clear(l.subs)
	return out
}
