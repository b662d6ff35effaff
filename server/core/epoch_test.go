package core

import (
	"testing"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// inEpoch remakes c's cores in epoch e (their keys unchanged).
func (c *cluster) inEpoch(e uint64) {
	c.keys.Epoch = e
	for i := range c.cores {
		c.cores[i] = c.newCore(i, len(c.cores), c.cores[i].cfg.F)
	}
}

// docs/protocol.md change 43: a server signs its Views in its epoch, takes a
// Ticket only with a J of Views of its epoch — a J of another epoch is
// refused and convicts nobody, since a correct client's attempt can straddle
// a change — and applies only certificates of votes of its epoch.
func TestViewsJsAndCertificatesOfTheServersEpoch(t *testing.T) {
	c := newCluster(t, 4, 1)
	old := c.newClient()
	jOld := c.doorway(old, "L", 1, 1) // Views of epoch 0, by the same keys
	c.inEpoch(3)

	cl := c.newClient()
	j := c.doorway(cl, "L", 1, 1)
	for _, v := range j {
		body, err := v.Verify(c.keys)
		require.NoError(t, err)
		require.EqualValues(t, 3, body.Epoch, "a View names its signer's epoch")
	}

	// Re-run old's doorway here and submit its Ticket with the J of epoch 0.
	c.doorway(old, "L", 1, 1)
	c.fromClient(0, old.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: old.stmt("L", 1, 1, wire.PhaseTicket, 1, jOld), J: jOld}})
	require.Equal(t, []wire.ErrorCode{wire.ErrCodeRejected}, errorCodes(c.replies(old.id)), "a J of another epoch is refused")
	require.False(t, c.cores[0].Banned(old.id), "and convicts nobody")
	require.Equal(t, wire.PhaseDoorway, c.cores[0].Register("L", old.id).Phase)

	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: cl.stmt("L", 1, 1, wire.PhaseTicket, 1, j), J: j}})
	require.Empty(t, errorCodes(c.replies(cl.id)), "a J of this epoch is taken")
	require.Equal(t, wire.PhaseTicket, c.cores[0].Register("L", cl.id).Phase)

	// q votes of epoch 0 are no certificate in epoch 3; q of epoch 3 are.
	c.keys.Epoch = 0
	stale := c.certify(cl.id, 1, c.cores[0].q)
	c.keys.Epoch = 3
	c.fromServer(0, 1, &wire.Message{Reset: stale})
	require.NotNil(t, c.cores[0].Register("L", cl.id), "votes of another epoch reset nothing")
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(cl.id, 1, c.cores[0].q)})
	require.Nil(t, c.cores[0].Register("L", cl.id), "a certificate of this epoch resets the session")
}
