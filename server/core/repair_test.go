package core

import (
	"testing"
	"time"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// An overflow toward a peer is repaired by one resync once the queue had
// RepairDrain to drain, and no more often than RepairEvery per peer while
// overflows go on; nothing is due without an overflow.
func TestRepairSchedule(t *testing.T) {
	var r Repair
	t0 := time.Unix(100, 0)
	require.Empty(t, r.Due(t0))
	r.Overflowed(2, t0)
	r.Overflowed(2, t0.Add(time.Millisecond)) // one repair covers both
	r.Overflowed(1, t0.Add(10*time.Millisecond))
	require.Empty(t, r.Due(t0.Add(RepairDrain-time.Millisecond)))
	require.Equal(t, []wire.ServerID{2}, r.Due(t0.Add(RepairDrain)))
	require.Equal(t, []wire.ServerID{1}, r.Due(t0.Add(RepairDrain+10*time.Millisecond)))
	require.False(t, r.Pending())

	// Overflows go on: the next resync of peer 2 waits RepairEvery.
	t1 := t0.Add(RepairDrain)
	r.Overflowed(2, t1.Add(time.Millisecond))
	require.True(t, r.Pending())
	require.Empty(t, r.Due(t1.Add(RepairEvery-time.Millisecond)))
	require.Equal(t, []wire.ServerID{2}, r.Due(t1.Add(RepairEvery)))
	require.Empty(t, r.Due(t1.Add(10*RepairEvery)))
}
