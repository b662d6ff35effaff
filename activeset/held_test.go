package activeset

import (
	"testing"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// settledBehind is the core's Settled rule (server/core settledFor) for a
// listener holding ticket n: an Exit, or a Ticket or Held above n.
func settledBehind(n uint64) func(wire.ClientID, *Entry) bool {
	return func(_ wire.ClientID, e *Entry) bool {
		switch {
		case e == nil:
			return false
		case e.St.Phase == wire.PhaseExit:
			return true
		case e.St.Phase == wire.PhaseTicket, e.St.Phase == wire.PhaseHeld:
			return e.St.N > n
		}
		return false
	}
}

func heldListen(w signer, n uint64, members ...signer) *Subscription {
	watch := make(map[wire.ClientID]bool, len(members))
	for _, m := range members {
		watch[m.id] = true
	}
	return &Subscription{Client: w.id, Req: 7, Watch: watch, Remaining: 256, Settled: settledBehind(n), Hold: true}
}

func phases(u *wire.Update) map[wire.ClientID]wire.Phase {
	out := make(map[wire.ClientID]wire.Phase)
	for _, ss := range u.Statements {
		st, err := ss.Verify(wire.ClusterID{})
		if err == nil {
			out[st.Client] = st.Phase
		}
	}
	return out
}

// A held Listen (docs/protocol.md change 27) hears nothing while a member
// is ahead of its client here, then exactly one Update, Last and Released,
// with the value that settled each member and the absence of the rest.
func TestHeldListenAnswersOnceWhenNothingAhead(t *testing.T) {
	l := NewLock("L")
	a, b, c, d, w := newSigner(t), newSigner(t), newSigner(t), newSigner(t), newSigner(t)
	l.Apply(a.entry(t, 1, 1, wire.PhaseTicket, 1)) // ahead
	l.Apply(b.entry(t, 1, 1, wire.PhaseTicket, 2)) // ahead
	l.Apply(d.entry(t, 1, 1, wire.PhaseTicket, 9)) // behind: settled at once
	// c: no value here (its Doorway still on its way).
	require.Nil(t, l.Subscribe(heldListen(w, 5, a, b, c, d), nil), "a and b are ahead: nothing yet")
	require.Equal(t, 1, l.Subscribers())

	l.Apply(a.entry(t, 1, 1, wire.PhaseHeld, 1))
	require.Empty(t, l.Changed(a.id, nil), "a Held changes nothing the listener can act on")
	l.Apply(a.entry(t, 1, 1, wire.PhaseExit, 0))
	require.Empty(t, l.Changed(a.id, nil), "b is still ahead")
	l.Apply(a.entry(t, 1, 2, wire.PhaseDoorway, 0))
	require.Empty(t, l.Changed(a.id, nil), "a settled by its Exit: its next attempt is not watched")
	l.Apply(c.entry(t, 1, 1, wire.PhaseDoorway, 0))
	require.Empty(t, l.Changed(c.id, nil), "c chooses: it blocks here now")
	l.Apply(b.entry(t, 1, 1, wire.PhaseExit, 0))
	require.Empty(t, l.Changed(b.id, nil), "c is still choosing")
	l.Apply(c.entry(t, 1, 1, wire.PhaseTicket, 6))

	p := l.Changed(c.id, nil)
	require.Len(t, p, 1, "released: one message")
	u := p[0].Update
	require.Equal(t, w.id, p[0].To)
	require.Equal(t, uint64(7), u.Req)
	require.True(t, u.Last)
	require.True(t, u.Released)
	require.Equal(t, map[wire.ClientID]wire.Phase{c.id: wire.PhaseTicket, d.id: wire.PhaseTicket},
		phases(u), "c's and d's Tickets behind; a and b left by their Exits: named by their absence alone (change 61)")
	require.ElementsMatch(t, []wire.ClientID{a.id, b.id}, u.Absent, "a (not its next Doorway) and b")
	require.Zero(t, l.Subscribers(), "a released Listen is forgotten")
	l.Apply(d.entry(t, 1, 1, wire.PhaseExit, 0))
	require.Empty(t, l.Changed(d.id, nil))
}

// A held Listen with nothing ahead here is answered at once: members
// behind are described, members without a value here are reported absent
// (the absence rule needs q such reports, §3.3).
func TestHeldListenReleasedAtOnce(t *testing.T) {
	l := NewLock("L")
	a, c, w := newSigner(t), newSigner(t), newSigner(t)
	l.Apply(a.entry(t, 1, 1, wire.PhaseTicket, 8))
	u := l.Subscribe(heldListen(w, 5, a, c), nil)
	require.NotNil(t, u)
	require.True(t, u.Released)
	require.True(t, u.Last)
	require.Equal(t, []wire.ClientID{c.id}, u.Absent)
	require.Equal(t, map[wire.ClientID]wire.Phase{a.id: wire.PhaseTicket}, phases(u))
	require.Zero(t, l.Subscribers())
}

// A reset of the member ahead releases the report, with its certificate.
func TestHeldListenReleasedByReset(t *testing.T) {
	l := NewLock("L")
	a, w := newSigner(t), newSigner(t)
	l.Apply(a.entry(t, 1, 1, wire.PhaseTicket, 1))
	require.Nil(t, l.Subscribe(heldListen(w, 5, a), nil))
	cert := &wire.ResetCertificate{Client: a.id, Session: 1}
	certFor := func(x wire.ClientID) *wire.ResetCertificate {
		if x == a.id {
			return cert
		}
		return nil
	}
	forgotten, wasMember := l.ForgetUpTo(a.id, 1)
	require.True(t, forgotten && wasMember)
	p := l.ChangedByReset(a.id, certFor)
	require.Len(t, p, 1)
	require.True(t, p[0].Update.Released)
	require.Equal(t, []wire.ClientID{a.id}, p[0].Update.Absent)
	require.Len(t, p[0].Update.Resets, 1)
}

// No herd: with k waiters queued behind a holder, each handoff pushes to
// one waiter only, the next one, instead of to every waiter that watches
// the member that left (k−1 pushes a handoff without Hold).
func TestHeldListensNoHerd(t *testing.T) {
	const k = 8
	l := NewLock("L")
	s := make([]signer, k)
	for i := range s {
		s[i] = newSigner(t)
		l.Apply(s[i].entry(t, 1, 1, wire.PhaseTicket, uint64(i+1)))
	}
	for i := 1; i < k; i++ {
		require.Nil(t, l.Subscribe(heldListen(s[i], uint64(i+1), s[:i]...), nil))
	}
	for i := 0; i < k-1; i++ {
		l.Apply(s[i].entry(t, 1, 1, wire.PhaseExit, 0))
		p := l.Changed(s[i].id, nil)
		require.Len(t, p, 1, "handoff %d", i)
		require.Equal(t, s[i+1].id, p[0].To, "handoff %d goes to the next waiter", i)
	}
	require.Zero(t, l.Subscribers())
}

// A member whose session this server voted on (docs/protocol.md change 42)
// is frozen here: it does not hold a Listen, whether frozen when the Listen
// comes or later (Refrozen), and the report still shows its value as it is.
// Another member ahead still holds the report.
func TestHeldListenFrozenMemberDoesNotBlock(t *testing.T) {
	a, b, w := newSigner(t), newSigner(t), newSigner(t)
	frozen := map[wire.ClientID]bool{}
	frozenHere := func(x wire.ClientID, _ *Entry) bool { return frozen[x] }
	listen := func(members ...signer) *Subscription {
		s := heldListen(w, 5, members...)
		s.Frozen = frozenHere
		return s
	}

	// Frozen when the Listen comes: answered at once, with a's Doorway.
	l := NewLock("L")
	l.Apply(a.entry(t, 1, 1, wire.PhaseDoorway, 0))
	require.Nil(t, l.Subscribe(listen(a), nil), "a chooses and is not frozen: held")
	frozen[a.id] = true
	u := l.Subscribe(listen(a), nil)
	require.NotNil(t, u, "a's value is frozen: it does not hold the Listen")
	require.True(t, u.Released)
	require.Equal(t, map[wire.ClientID]wire.Phase{a.id: wire.PhaseDoorway}, phases(u), "the report shows a's value as it is")
	require.Zero(t, l.Subscribers())

	// Frozen while the Listen is held: Refrozen releases it, unless another
	// member still blocks.
	frozen[a.id] = false
	l = NewLock("L")
	l.Apply(a.entry(t, 1, 1, wire.PhaseTicket, 1))
	l.Apply(b.entry(t, 1, 1, wire.PhaseDoorway, 0))
	require.Nil(t, l.Subscribe(listen(a, b), nil))
	require.Empty(t, l.Refrozen(a.id, nil), "a is not frozen yet")
	frozen[a.id] = true
	require.Empty(t, l.Refrozen(a.id, nil), "b still chooses")
	frozen[b.id] = true
	require.Empty(t, l.Refrozen(w.id, nil), "nobody watches the listener itself")
	p := l.Refrozen(b.id, nil)
	require.Len(t, p, 1)
	require.Equal(t, w.id, p[0].To)
	require.True(t, p[0].Update.Released && p[0].Update.Last)
	require.Equal(t, map[wire.ClientID]wire.Phase{a.id: wire.PhaseTicket, b.id: wire.PhaseDoorway}, phases(p[0].Update))
	require.Zero(t, l.Subscribers())
	require.Empty(t, l.Refrozen(b.id, nil), "a released Listen is forgotten")
}

// A member that left by its Exit is named by its absence alone in a held
// report, at release and as it settles during the hold; a snapshot without
// Hold still carries the Exit, which outranks a stale value another server
// reports (docs/protocol.md change 61).
func TestHeldReportNamesAnExitByItsAbsence(t *testing.T) {
	l := NewLock("L")
	a, b, w := newSigner(t), newSigner(t), newSigner(t)
	l.Apply(a.entry(t, 1, 1, wire.PhaseExit, 0))   // gone before the Listen
	l.Apply(b.entry(t, 1, 1, wire.PhaseTicket, 1)) // ahead
	require.Nil(t, l.Subscribe(heldListen(w, 5, a, b), nil), "b is ahead")
	l.Apply(b.entry(t, 1, 1, wire.PhaseExit, 0))
	p := l.Changed(b.id, nil)
	require.Len(t, p, 1)
	u := p[0].Update
	require.True(t, u.Released)
	require.Empty(t, u.Statements, "no Exit in a held report")
	require.ElementsMatch(t, []wire.ClientID{a.id, b.id}, u.Absent)

	unheld := heldListen(w, 5, a, b)
	unheld.Hold = false
	u = l.Subscribe(unheld, nil)
	require.False(t, u.Released)
	require.ElementsMatch(t, []wire.ClientID{a.id, b.id}, u.Absent)
	require.Equal(t, map[wire.ClientID]wire.Phase{a.id: wire.PhaseExit, b.id: wire.PhaseExit}, phases(u), "a snapshot carries the Exits")
}
