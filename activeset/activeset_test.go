package activeset

import (
	"crypto/rand"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

type signer struct {
	key *crypto.PrivateKey
	id  wire.ClientID
}

func newSigner(t *testing.T) signer {
	k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	return signer{key: k, id: wire.ClientID(k.Public.ID)}
}

func (s signer) entry(t *testing.T, sess, att uint64, ph wire.Phase, n uint64) *Entry {
	st := &wire.Statement{Lock: "L", Client: s.id, Session: sess, Attempt: att, Phase: ph, N: n}
	if ph == wire.PhaseTicket {
		st.JHash = &wire.Digest{}
	}
	ss, err := wire.SignStatement(s.key, wire.ClusterID{}, st)
	require.NoError(t, err)
	got, err := ss.Verify(wire.ClusterID{})
	require.NoError(t, err)
	return &Entry{Signed: ss, St: got}
}

// §2: join = Doorway, leave = Exit or reset; newer timestamps win; a
// different statement with the same timestamp is equivocation.
func TestApplyAndMembership(t *testing.T) {
	l := NewLock("L")
	a, b := newSigner(t), newSigner(t)
	out, _ := l.Apply(a.entry(t, 1, 1, wire.PhaseDoorway, 0))
	require.Equal(t, Accepted, out)
	require.True(t, l.IsMember(a.id))
	out, _ = l.Apply(a.entry(t, 1, 1, wire.PhaseDoorway, 0))
	require.Equal(t, Duplicate, out)
	out, _ = l.Apply(a.entry(t, 1, 1, wire.PhaseTicket, 3))
	require.Equal(t, Accepted, out)
	require.Equal(t, uint64(3), l.HW().St.N)
	out, _ = l.Apply(a.entry(t, 1, 1, wire.PhaseDoorway, 0))
	require.Equal(t, Stale, out, "a late copy never rolls a register back")
	out, prev := l.Apply(a.entry(t, 1, 1, wire.PhaseTicket, 4))
	require.Equal(t, Equivocation, out)
	require.Equal(t, uint64(3), prev.St.N)

	l.Apply(b.entry(t, 1, 1, wire.PhaseTicket, 2))
	require.Equal(t, uint64(3), l.HW().St.N, "hw only grows")
	require.Len(t, l.Members(), 2)
	l.Apply(a.entry(t, 1, 1, wire.PhaseExit, 0))
	require.False(t, l.IsMember(a.id))
	require.Equal(t, uint64(3), l.HW().St.N, "hw survives the holder's exit (fencing, §7)")

	forgotten, was := l.ForgetUpTo(b.id, 0)
	require.False(t, forgotten || was, "a reset of an older session leaves b's value")
	forgotten, was = l.ForgetUpTo(b.id, 1)
	require.True(t, forgotten && was, "a reset removes b")
	require.False(t, l.IsMember(b.id))
	require.Nil(t, l.Highest(b.id), "and collects its value")
	forgotten, _ = l.ForgetUpTo(b.id, 1)
	require.False(t, forgotten)
	require.Zero(t, l.MemberCount())
}

// §3: a subscription gets a snapshot, then one push per change to what it
// watches, and ends after T pushes (marked Last) or at Unsubscribe.
func TestListenersBoundedByT(t *testing.T) {
	l := NewLock("L")
	a, b, w := newSigner(t), newSigner(t), newSigner(t)
	l.Apply(a.entry(t, 1, 1, wire.PhaseDoorway, 0))
	snap := l.Subscribe(&Subscription{Client: w.id, Req: 9, Watch: map[wire.ClientID]bool{a.id: true, b.id: true}, Remaining: 2}, nil)
	require.Len(t, snap.Statements, 1)
	require.Equal(t, []wire.ClientID{b.id}, snap.Absent)
	require.False(t, snap.Last)

	l.Apply(a.entry(t, 1, 1, wire.PhaseTicket, 1))
	p := l.Changed(a.id, nil)
	require.Len(t, p, 1)
	require.Equal(t, w.id, p[0].To)
	require.False(t, p[0].Update.Last)
	// Changes of clients not watched are not pushed.
	c := newSigner(t)
	l.Apply(c.entry(t, 1, 1, wire.PhaseDoorway, 0))
	require.Empty(t, l.Changed(c.id, nil))

	l.Apply(a.entry(t, 1, 1, wire.PhaseExit, 0))
	p = l.Changed(a.id, nil)
	require.Len(t, p, 1)
	require.True(t, p[0].Update.Last, "the T-th push is the last")
	require.Equal(t, []wire.ClientID{a.id}, p[0].Update.Absent)
	require.Zero(t, l.Subscribers())
	l.Apply(a.entry(t, 1, 2, wire.PhaseDoorway, 0))
	require.Empty(t, l.Changed(a.id, nil), "nothing after T")

	// GetSet subscriptions watch everyone; Unsubscribe ends them.
	l.Subscribe(&Subscription{Client: w.id, Req: 10, Remaining: 5}, nil)
	l.Apply(b.entry(t, 1, 1, wire.PhaseDoorway, 0))
	require.Len(t, l.Changed(b.id, nil), 1)
	l.Unsubscribe(w.id)
	l.Apply(b.entry(t, 1, 1, wire.PhaseExit, 0))
	require.Empty(t, l.Changed(b.id, nil))
}

// Algorithm 1: getSet returns a set only once q distinct servers report the same one.
func TestSetReaderNeedsQMatching(t *testing.T) {
	a, b := newSigner(t).id, newSigner(t).id
	r := NewSetReader(3)
	_, ok := r.Apply(0, true, []wire.ClientID{a}, nil)
	require.False(t, ok)
	_, ok = r.Apply(1, true, []wire.ClientID{a, b}, nil)
	require.False(t, ok)
	_, ok = r.Apply(2, true, []wire.ClientID{a}, nil)
	require.False(t, ok, "two matching servers are not q")
	set, ok := r.Apply(1, false, nil, []wire.ClientID{b})
	require.True(t, ok, "server 1's push brings it in line")
	require.Equal(t, []wire.ClientID{a}, set)
	// A server replaying one set many times still counts once.
	r2 := NewSetReader(3)
	for range 5 {
		_, ok = r2.Apply(3, true, []wire.ClientID{a}, nil)
		require.False(t, ok)
	}
}

// A client's GetSet on a lock does not end its own Listen there (they were
// one subscription, and reading the set silently ended the wait: test/sim).
func TestGetSetKeepsOwnListen(t *testing.T) {
	l := NewLock("L")
	a, w := newSigner(t), newSigner(t)
	l.Apply(a.entry(t, 1, 1, wire.PhaseDoorway, 0))
	l.Subscribe(&Subscription{Client: w.id, Req: 1, Watch: map[wire.ClientID]bool{a.id: true}, Remaining: 5}, nil)
	l.Subscribe(&Subscription{Client: w.id, Req: 2, Remaining: 5}, nil)
	require.Equal(t, 2, l.Subscribers())
	l.Apply(a.entry(t, 1, 1, wire.PhaseExit, 0))
	p := l.Changed(a.id, nil)
	require.Len(t, p, 2)
	require.Equal(t, uint64(1), p[0].Update.Req, "the Listen comes first, deterministically")
	require.Equal(t, uint64(2), p[1].Update.Req)
	l.UnsubscribeListen(w.id)
	require.Equal(t, 1, l.Subscribers())
	l.Unsubscribe(w.id)
	require.Zero(t, l.Subscribers())
}

// A change no waiting client can act on (a Held after its Ticket) reaches
// GetSet observers only; a Listen keeps its T for changes that matter.
func TestChangedNotListensSkipsListens(t *testing.T) {
	l := NewLock("L")
	a, w, o := newSigner(t), newSigner(t), newSigner(t)
	l.Apply(a.entry(t, 1, 1, wire.PhaseTicket, 1))
	l.Subscribe(&Subscription{Client: w.id, Req: 1, Watch: map[wire.ClientID]bool{a.id: true}, Remaining: 1}, nil)
	l.Subscribe(&Subscription{Client: o.id, Req: 2, Remaining: 5}, nil)
	l.Apply(a.entry(t, 1, 1, wire.PhaseHeld, 1))
	p := l.ChangedNotListens(a.id, nil)
	require.Len(t, p, 1)
	require.Equal(t, o.id, p[0].To, "only the GetSet observer")
	l.Apply(a.entry(t, 1, 1, wire.PhaseExit, 0))
	p = l.Changed(a.id, nil)
	require.Len(t, p, 2, "the Exit reaches the listener, whose one push was kept for it")
}

// A Listen stops hearing of a member once a statement settles it (its Exit
// here): the member's next attempt is not pushed to a client that can no
// longer act on it (docs/protocol.md change 15).
func TestSettledMemberLeavesWatch(t *testing.T) {
	l := NewLock("L")
	a, b, w := newSigner(t), newSigner(t), newSigner(t)
	l.Apply(a.entry(t, 1, 1, wire.PhaseTicket, 1))
	l.Apply(b.entry(t, 1, 1, wire.PhaseTicket, 2))
	settledByExit := func(x wire.ClientID, e *Entry) bool { return e != nil && e.St.Phase == wire.PhaseExit }
	snap := l.Subscribe(&Subscription{Client: w.id, Req: 1, Watch: map[wire.ClientID]bool{a.id: true, b.id: true},
		Remaining: 10, Settled: settledByExit}, nil)
	require.Len(t, snap.Statements, 2)
	l.Apply(a.entry(t, 1, 1, wire.PhaseExit, 0))
	require.Len(t, l.Changed(a.id, nil), 1, "the Exit is pushed")
	l.Apply(a.entry(t, 1, 2, wire.PhaseDoorway, 0))
	require.Empty(t, l.Changed(a.id, nil), "a's next attempt is not")
	l.Apply(b.entry(t, 1, 1, wire.PhaseHeld, 2))
	require.Len(t, l.Changed(b.id, nil), 1, "b is not settled: still watched")
}
