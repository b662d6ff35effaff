package quorum

import (
	"testing"
	"testing/quick"
	"time"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// bruteQuorum is the smallest q such that any two q-subsets of n servers
// meet in ≥ f+1 servers (2q − n ≥ f+1) and n−f servers still form a quorum.
func bruteQuorum(n, f int) int {
	for q := 1; q <= n; q++ {
		if 2*q-n >= f+1 && q <= n-f {
			return q
		}
	}
	return -1
}

// docs/protocol.md notation: q = ⌈(n+f+1)/2⌉, checked against the definition.
func TestSizeMatchesDefinition(t *testing.T) {
	check := func(a, b uint8) bool {
		n := int(a%64) + 1
		f := int(b) % (MaxFaults(n) + 1)
		return Size(n, f) == bruteQuorum(n, f)
	}
	require.NoError(t, quick.Check(check, &quick.Config{MaxCount: 2000}))
	require.Equal(t, 3, Size(4, 1))
	require.Equal(t, 5, Size(7, 2))
	require.Error(t, Check(3, 1))
	require.NoError(t, Check(4, 1))
	require.Error(t, Check(0, 0))
}

// Only the first verified reply of each server counts; rejected replies never do.
func TestAccessCountsDistinctVerifiedServers(t *testing.T) {
	a := NewAccess[int](3)
	require.False(t, a.Offer(0, 1))
	require.False(t, a.Offer(0, 2), "a second reply of server 0 must not count")
	a.Reject(1, errBad)
	require.False(t, a.Offer(1, 3), "a server whose reply failed verification never counts")
	require.False(t, a.Offer(2, 4))
	require.True(t, a.Offer(3, 5))
	require.Equal(t, 3, a.Count())
	require.Equal(t, []Reply[int]{{0, 1}, {2, 4}, {3, 5}}, a.First())
	require.Contains(t, a.Rejected(), "s1")
}

var errBad = errorString("bad")

type errorString string

func (e errorString) Error() string { return string(e) }

func st(sess, att uint64, ph wire.Phase) *wire.Statement {
	return &wire.Statement{Lock: "L", Session: sess, Attempt: att, Phase: ph}
}

// §2: a read returns the highest valid statement that no answer shows void.
func TestReadRegister(t *testing.T) {
	require.Nil(t, ReadRegister(nil))
	got := ReadRegister([]RegisterValue{{Statement: st(1, 1, wire.PhaseDoorway)}, {Statement: st(1, 1, wire.PhaseTicket)}, {}})
	require.Equal(t, wire.PhaseTicket, got.Phase)
	got = ReadRegister([]RegisterValue{{Statement: st(1, 2, wire.PhaseDoorway)}, {Statement: st(1, 1, wire.PhaseHeld)}})
	require.Equal(t, uint64(2), got.Attempt, "attempt orders before phase")
	// One answer's reset certificate voids session 1 everywhere.
	got = ReadRegister([]RegisterValue{{Statement: st(1, 5, wire.PhaseHeld)}, {Statement: st(2, 1, wire.PhaseDoorway)}, {ResetUpTo: 1}})
	require.Equal(t, uint64(2), got.Session)
	require.Nil(t, ReadRegister([]RegisterValue{{Statement: st(1, 5, wire.PhaseHeld), ResetUpTo: 1}}))
}

// §5: the guarantee holds while q servers that did not suspect the session
// acknowledged heartbeats sent less than TTL−margin ago, and not longer.
func TestLeaseGuarantee(t *testing.T) {
	t0 := time.Unix(100, 0)
	l := NewLease(3, 10*time.Second, time.Second, 7)
	l.Sent(0, t0)
	l.Ack(0, 7, 0, true)
	l.Ack(1, 7, 0, true)
	require.False(t, l.Holds(t0), "two acks are not a quorum")
	l.Ack(2, 7, 0, true)
	l.Ack(3, 6, 0, true) // another session: ignored
	require.True(t, l.Holds(t0))
	require.Equal(t, t0.Add(9*time.Second), l.ValidUntil())
	require.False(t, l.Holds(t0.Add(9*time.Second)), "valid for TTL−margin after the send, not after the ack")

	l.Sent(1, t0.Add(3*time.Second))
	l.Ack(0, 7, 1, true)
	l.Ack(1, 7, 1, true)
	require.Equal(t, t0.Add(9*time.Second), l.ValidUntil(), "the q-th newest ack decides")
	l.Ack(2, 7, 1, true)
	require.Equal(t, t0.Add(12*time.Second), l.ValidUntil())

	// A server that suspected the session never counts again, even with fresh acks.
	l.Ack(2, 7, 1, false)
	l.Sent(2, t0.Add(6*time.Second))
	l.Ack(2, 7, 2, true)
	require.False(t, l.Holds(t0.Add(10*time.Second)))
	require.Equal(t, 1, l.Suspicions())
	l.Ack(3, 7, 2, true)
	require.True(t, l.Holds(t0.Add(10*time.Second)))
}
