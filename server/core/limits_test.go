package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// limitOf is the Limit of the one reply, which must be a Limit refusal.
func limitOf(t *testing.T, rs []*wire.Message) *wire.Limit {
	t.Helper()
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Error, "%s", rs[0])
	require.Equal(t, wire.ErrCodeLimit, rs[0].Error.Code)
	require.NotNil(t, rs[0].Error.Limit)
	return rs[0].Error.Limit
}

// One identity's requests are a token bucket (change 25): past its burst
// a request is refused with the limit, its value and when to retry; the
// lease's own messages are never refused; a reconnect does not refill the
// bucket; an identity that left is forgotten once its bucket is full.
func TestClientRateRefusesWithRetryAfter(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[0]
	k.cfg.ClientRate, k.cfg.ClientBurst = 10, 5
	cl := c.newClient()
	c.connect(cl, nil)
	at := c.now
	getSet := func(req uint64) []*wire.Message {
		c.effects(0, k.Step(at, Input{From: wire.ClientPeer(cl.id), Msg: roundTrip(t, &wire.Message{GetSet: &wire.GetSet{Req: req, Lock: "L"}})}))
		return c.replies(cl.id)
	}
	for i := range 5 {
		require.Empty(t, errorCodes(getSet(uint64(i+1))), "within the burst")
	}
	rs := getSet(6)
	require.Equal(t, &wire.Limit{Name: "client_rate", Value: 10, RetryAfterMillis: 100}, limitOf(t, rs))
	require.Contains(t, rs[0].Error.Detail, "limit client_rate (10) reached")
	require.Contains(t, rs[0].Error.Detail, "retry after 100ms")
	require.Equal(t, uint64(1), k.Stats.Limited["client_rate"])

	c.effects(0, k.Step(at, Input{From: wire.ClientPeer(cl.id), Msg: roundTrip(t, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})}))
	c.effects(0, k.Step(at, Input{From: wire.ClientPeer(cl.id), Msg: roundTrip(t, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 1}})}))
	for _, m := range c.replies(cl.id) {
		require.NotNil(t, m.SessionAck, "the lease's messages pass: %s", m)
	}

	// A reconnect does not refill the bucket.
	c.effects(0, k.Step(at, Input{Kind: InputDisconnected, From: wire.ClientPeer(cl.id)}))
	c.effects(0, k.Step(at, Input{Kind: InputConnected, From: wire.ClientPeer(cl.id)}))
	limitOf(t, getSet(7))

	at = at.Add(100 * time.Millisecond)
	require.Empty(t, errorCodes(getSet(8)), "a token came back")

	// Gone and full again: forgotten at the next sweep.
	c.effects(0, k.Step(at, Input{Kind: InputDisconnected, From: wire.ClientPeer(cl.id)}))
	c.effects(0, k.Tick(at.Add(rateSweepEvery)))
	require.Empty(t, k.rates)
}

// New lock names are a bucket per identity; a name it already uses takes
// nothing from it.
func TestNewLockNamesPerMinute(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[0]
	k.cfg.NewLocksPerMinute = 60 // one a second, a burst of 10
	cl := c.newClient()
	c.connect(cl, nil)
	c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	for i := range 10 {
		c.fromClient(0, cl.id, &wire.Message{GetSet: &wire.GetSet{Req: uint64(i + 1), Lock: fmt.Sprint("L", i)}})
	}
	c.fromClient(0, cl.id, &wire.Message{GetSet: &wire.GetSet{Req: 20, Lock: "L0"}})
	require.Empty(t, errorCodes(c.replies(cl.id)))
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 21, Statement: cl.stmt("fresh", 1, 1, wire.PhaseDoorway, 0, nil)}})
	l := limitOf(t, c.replies(cl.id))
	require.Equal(t, "new_locks_per_minute", l.Name)
	require.Equal(t, uint64(60), l.Value)
	require.InDelta(t, 1000, float64(l.RetryAfterMillis), 20)
	require.Nil(t, k.locks["fresh"])
}

// The locks in use at a server are bounded (max_locks); a lock already in
// use is no new one.
func TestMaxLocks(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[0]
	k.cfg.MaxLocks = 2
	a, b := c.newClient(), c.newClient()
	for _, name := range []string{"L0", "L1"} {
		c.fromClient(0, a.id, &wire.Message{GetSet: &wire.GetSet{Req: 1, Lock: name}})
	}
	require.Empty(t, errorCodes(c.replies(a.id)))
	c.fromClient(0, b.id, &wire.Message{GetSet: &wire.GetSet{Req: 2, Lock: "L2"}})
	require.Equal(t, &wire.Limit{Name: "max_locks", Value: 2}, limitOf(t, c.replies(b.id)))
	c.fromClient(0, b.id, &wire.Message{GetSet: &wire.GetSet{Req: 3, Lock: "L1"}})
	require.Empty(t, errorCodes(c.replies(b.id)))
}

// A faulty server can make equivocation evidence against identities it
// made up itself; past MaxBans a correct server bans only clients it knows
// otherwise, so such bans cannot grow without bound (change 25).
func TestBansOfUnknownClientsBounded(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[0]
	k.cfg.MaxBans = 3
	equivocation := func(cl *client) *wire.Evidence {
		a, b := cl.stmt("L", 1, 1, wire.PhaseTicket, 1, nil), cl.stmt("L", 1, 1, wire.PhaseTicket, 2, nil)
		return &wire.Evidence{Kind: wire.EvidenceEquivocation, A: a, B: &b}
	}
	for range 5 {
		c.fromServer(0, 3, &wire.Message{Evidence: equivocation(c.newClient())})
	}
	require.Equal(t, 3, len(k.banned), "made-up identities past the bound are not kept")
	known := c.newClient()
	c.fromClient(0, known.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	c.fromServer(0, 3, &wire.Message{Evidence: equivocation(known)})
	require.True(t, k.Banned(known.id), "a client known here is banned whatever the bound")
}

// The live state (registers and justifications) is bounded: past
// MaxStateBytes a statement that would add a register is refused, one that
// replaces a client's own value is not; the count follows applies,
// collections and bans exactly (change 25).
func TestStateBytesBounded(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[0]
	a, b, x := c.newClient(), c.newClient(), c.newClient()
	c.doorway(a, "L", 1, 1)
	one := k.stateBytes
	require.Positive(t, one)
	k.cfg.MaxStateBytes = 2*one + one/2
	c.doorway(b, "L", 1, 1)
	for _, cl := range []*client{a, b, x} {
		c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
		c.replies(cl.id)
	}
	c.fromClient(0, x.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: x.stmt("M", 1, 1, wire.PhaseDoorway, 0, nil)}})
	l := limitOf(t, c.replies(x.id))
	require.Equal(t, "max_state_bytes", l.Name)
	require.Nil(t, k.Register("M", x.id))

	c.fromClient(0, a.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: a.stmt("L", 1, 1, wire.PhaseExit, 0, nil)}})
	require.Empty(t, errorCodes(c.replies(a.id)), "a client's own register is always replaced")
	tracked, counted := k.StateBytes()
	require.Equal(t, counted, tracked)

	c.fromServer(0, 1, &wire.Message{Reset: c.certify(b.id, 1, k.q)})
	tracked, counted = k.StateBytes()
	require.Equal(t, counted, tracked)
	require.Less(t, tracked, one+one/2, "the reset collected b's register")
}

// An Exit is never refused by a limit (change 25): an attempt whose Doorway
// the bucket of new names refused still ends, at once, instead of waiting
// for its Exit's acks for ever (found by the attack benchmark).
func TestExitNeverRefusedByALimit(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[0]
	k.cfg.NewLocksPerMinute = 60
	k.cfg.MaxLocks = 11
	cl := c.newClient()
	c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	for i := range 10 {
		c.fromClient(0, cl.id, &wire.Message{GetSet: &wire.GetSet{Req: uint64(i + 1), Lock: fmt.Sprint("L", i)}})
	}
	c.replies(cl.id)
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 20, Statement: cl.stmt("fresh", 1, 1, wire.PhaseDoorway, 0, nil)}})
	require.Equal(t, "new_locks_per_minute", limitOf(t, c.replies(cl.id)).Name)
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 21, Statement: cl.stmt("fresh", 1, 1, wire.PhaseExit, 0, nil)}})
	rs := c.replies(cl.id)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Ack, "%s", rs[0])
	st := k.Register("fresh", cl.id)
	require.NotNil(t, st, "the Exit is kept, so a late copy of its Doorway stays stale")
	require.Equal(t, wire.PhaseExit, st.Phase)

	// Past max_locks too: the Exit is acked with nothing kept.
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 22, Statement: cl.stmt("other", 1, 2, wire.PhaseExit, 0, nil)}})
	rs = c.replies(cl.id)
	require.Len(t, rs, 1)
	require.NotNil(t, rs[0].Ack, "%s", rs[0])
	require.Nil(t, k.locks["other"])
}
