package activeset

import (
	"bytes"
	"slices"

	"github.com/bq-lock/bq/wire"
)

// Herd-free listening (docs/protocol.md change 27): a Listen with Hold is
// answered once, when none of its members is ahead of the listener at this
// server, instead of with a snapshot and a push per change. The report
// gathers each member as it settles (the value that settled it) and, at
// release, the current value of the members left, all absent here.

// subscribeHeld registers s and answers nothing, or answers at once with
// the released report if no member blocks here already.
func (l *Lock) subscribeHeld(s *Subscription, u *wire.Update, certFor CertFor) *wire.Update {
	for _, x := range sortedIDs(s.Watch) {
		if s.Settled != nil && s.Settled(x, l.highest[x]) {
			l.describe(u, x, certFor, true)
			delete(s.Watch, x)
		}
	}
	if l.blocks(s) {
		s.held = u
		l.subs[s.key()] = s
		return nil
	}
	return l.release(s, u, certFor)
}

// heldChanged takes member c's change into the held report of s, and
// returns the report if it is released now (s is then forgotten).
func (l *Lock) heldChanged(s *Subscription, c wire.ClientID, certFor CertFor, reset bool) *wire.Update {
	if reset || (s.Settled != nil && s.Settled(c, l.highest[c])) {
		l.describe(s.held, c, certFor, true)
		delete(s.Watch, c)
	}
	if l.blocks(s) {
		return nil
	}
	return l.releaseHeld(s, certFor)
}

// releaseHeld sends the held report of s, registered until now, and
// forgets s.
func (l *Lock) releaseHeld(s *Subscription, certFor CertFor) *wire.Update {
	u := s.held
	u.Seq = l.seq
	delete(l.subs, s.key())
	s.held = nil
	return l.release(s, u, certFor)
}

// blocks says whether some member s watches is still ahead of its client
// here: its value is active (a Doorway, a Ticket or Held that has not
// settled it and so left Watch) and not frozen (change 42). A member with no
// value here, an Exit or a voided value does not block: only q servers'
// reports of absence pass it.
func (l *Lock) blocks(s *Subscription) bool {
	if s.Watch[s.blocker] && l.blocksAs(s, s.blocker) {
		return true
	}
	for x := range s.Watch {
		if l.blocksAs(s, x) {
			s.blocker = x
			return true
		}
	}
	return false
}

// blocksAs says whether member x, which s watches, is ahead of s's client here.
func (l *Lock) blocksAs(s *Subscription, x wire.ClientID) bool {
	e := l.highest[x]
	return e.Active() && (s.Frozen == nil || !s.Frozen(x, e))
}

// Refrozen returns the held reports released now that member c's value
// here is frozen (this server voted on its session, docs/protocol.md
// change 42): each held Listen watching c that nothing else blocks.
func (l *Lock) Refrozen(c wire.ClientID, certFor CertFor) []Push {
	var out []Push
	for _, s := range l.subsWatching(c, true) {
		if s.held == nil || l.blocks(s) {
			continue
		}
		out = append(out, Push{To: s.Client, Update: l.releaseHeld(s, certFor)})
	}
	return out
}

// release completes u with the current value of every member left in
// s.Watch and marks it the subscription's one answer.
func (l *Lock) release(s *Subscription, u *wire.Update, certFor CertFor) *wire.Update {
	for _, x := range sortedIDs(s.Watch) {
		l.describe(u, x, certFor, true)
	}
	u.Last, u.Released = true, true
	return u
}

func sortedIDs(set map[wire.ClientID]bool) []wire.ClientID {
	ids := make([]wire.ClientID, 0, len(set))
	for c := range set {
		ids = append(ids, c)
	}
	slices.SortFunc(ids, func(a, b wire.ClientID) int { return bytes.Compare(a[:], b[:]) })
	return ids
}
