package detector

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// Past its max-hold a holder's lease is refused at once and voted on when
// the lease its last heartbeat renewed runs out — not a TTL after the
// refusal: a holder that also went silent is reset within the 2×TTL of §5
// (found by the simulator, seed 223). A clock that ended, or one on a reset
// session, refuses nothing.
func TestMaxHoldRefusesAndKeepsTheLeaseEnd(t *testing.T) {
	m := newFixture(t, 4, 3, 5*time.Second).dets[0]
	c := wire.ClientID{7}
	t0 := time.Unix(1000, 0)
	ttl := 2 * time.Second
	_, err := m.Open(c, 1, ttl, t0)
	require.NoError(t, err)
	m.HoldStarted(c, "L", 1, t0, 1500*time.Millisecond)
	m.HoldStarted(c, "L", 1, t0.Add(time.Second), time.Hour) // the clock keeps its start and limit
	require.NoError(t, m.Heartbeat(c, 1, t0.Add(time.Second)))
	require.Empty(t, m.Tick(t0.Add(1400*time.Millisecond)))
	require.True(t, m.LeaseOK(c, 1, t0.Add(1400*time.Millisecond)))

	require.Empty(t, m.Tick(t0.Add(1500*time.Millisecond)))
	require.False(t, m.LeaseOK(c, 1, t0.Add(1500*time.Millisecond)), "refused at the max-hold")
	require.Error(t, m.Heartbeat(c, 1, t0.Add(1600*time.Millisecond)))
	require.Empty(t, m.Tick(t0.Add(2900*time.Millisecond)))
	require.Len(t, m.Tick(t0.Add(3*time.Second)), 1, "voted when the last renewal (1 s + TTL) ran out")

	// An ended clock refuses nothing; nor does a limit of zero.
	c2 := wire.ClientID{8}
	_, err = m.Open(c2, 1, ttl, t0)
	require.NoError(t, err)
	m.HoldStarted(c2, "L", 1, t0, time.Second)
	m.HoldEnded(c2, "L")
	m.HoldStarted(c2, "M", 1, t0, 0)
	require.Empty(t, m.Tick(t0.Add(1500*time.Millisecond)))
	require.True(t, m.LeaseOK(c2, 1, t0.Add(1500*time.Millisecond)))
	_, ended := m.Holding(c2, "L")
	require.False(t, ended)
}

// A clock started with no bound (a restarted server does not know the
// client's certificate yet) runs from its start and cuts nothing; the
// limit SetHoldLimit gives it later counts from that start, and zero
// takes the bound away again.
func TestMaxHoldLimitLearntLater(t *testing.T) {
	m := newFixture(t, 4, 3, 5*time.Second).dets[0]
	c := wire.ClientID{9}
	t0 := time.Unix(1000, 0)
	_, err := m.Open(c, 1, time.Hour, t0)
	require.NoError(t, err)
	m.HoldStarted(c, "M", 1, t0, 0)
	since, held := m.Holding(c, "M")
	require.True(t, held)
	require.Equal(t, t0, since)
	require.Empty(t, m.Tick(t0.Add(10*time.Second)))
	require.True(t, m.LeaseOK(c, 1, t0.Add(10*time.Second)), "no bound: nothing cut")

	m.SetHoldLimit(c, 0)
	m.SetHoldLimit(c, 20*time.Second)
	require.Empty(t, m.Tick(t0.Add(20*time.Second-time.Millisecond)))
	require.True(t, m.LeaseOK(c, 1, t0.Add(20*time.Second-time.Millisecond)))
	require.Empty(t, m.Tick(t0.Add(20*time.Second)))
	require.False(t, m.LeaseOK(c, 1, t0.Add(20*time.Second)), "cut at the limit, counted from the clock's start")

	c3 := wire.ClientID{10}
	_, err = m.Open(c3, 1, time.Hour, t0)
	require.NoError(t, err)
	m.HoldStarted(c3, "M", 1, t0, time.Second)
	m.SetHoldLimit(c3, 0)
	require.Empty(t, m.Tick(t0.Add(time.Minute)))
	require.True(t, m.LeaseOK(c3, 1, t0.Add(time.Minute)), "a limit taken away cuts nothing")
}
