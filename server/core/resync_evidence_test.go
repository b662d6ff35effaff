package core

import (
	"testing"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// A server that missed a ban's evidence while it went round (it is forwarded
// once) gets it when its channel to a server that banned comes back up: the
// resynchronisation carries evidence (docs/protocol.md, Changes from the design 9;
// found by the simulator, bqsim -seed 34 -byzantine all).
func TestEvidenceResyncedToPeerThatMissedIt(t *testing.T) {
	c := newCluster(t, 4, 1)
	bad := c.newClient()
	j := c.doorway(bad, "L", 1, 1)
	c.flush()
	tk := bad.stmt("L", 1, 1, wire.PhaseTicket, 1<<40, j)
	c.fromClient(1, bad.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	require.True(t, c.cores[1].Banned(bad.id))
	// Server 3 was away: everything sent to it is lost.
	for len(c.inflight) > 0 {
		m := c.inflight[0]
		c.inflight = c.inflight[1:]
		if m.to == 3 {
			continue
		}
		msg, err := wire.Decode(m.data)
		require.NoError(t, err)
		c.effects(int(m.to), c.cores[m.to].Step(c.now, Input{From: wire.ServerPeer(m.from), Msg: msg}))
	}
	require.False(t, c.cores[3].Banned(bad.id))
	// The channel 0–3 comes back up: 0 resynchronises 3.
	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ServerPeer(3)}))
	c.flush()
	for s, k := range c.cores {
		require.True(t, k.Banned(bad.id), "server %d must ban", s)
	}
}
