package core

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// A departed client's certificate gives way, after the retention, to the
// session it ended, on disk as in memory (change 26): a restart keeps the
// client's old sessions refused, and a peer's late vote on one is answered
// with this server's own vote instead of the certificate.
func TestSettledClientOnDiskAndAfterRestart(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[0]
	cl := c.newClient()
	c.doorway(cl, "L", 1, 1)
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(cl.id, 1, k.q)})
	c.drop()
	require.Contains(t, c.disks[0][bucketCert], string(cl.id[:]))
	c.tick(0)
	c.tick(k.mute.Retention())
	require.NotContains(t, c.disks[0][bucketCert], string(cl.id[:]), "the certificate is compacted")
	require.Contains(t, c.disks[0][bucketSettled], string(cl.id[:]))

	c.restart(0)
	k = c.cores[0]
	require.Equal(t, uint64(1), k.mute.ResetUpTo(cl.id))
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 5, Statement: cl.stmt("L", 1, 2, wire.PhaseDoorway, 0, nil)}})
	require.Equal(t, []wire.ErrorCode{wire.ErrCodeSuspected}, errorCodes(c.replies(cl.id)), "its old session stays refused")

	late, err := wire.SignSuspect(c.signers[2], c.keys.Cluster, &wire.SuspectBody{Client: cl.id, Session: 1, Server: 2, Reason: wire.SuspectMute})
	require.NoError(t, err)
	c.fromServer(0, 2, &wire.Message{Suspect: &late})
	var answered bool
	for _, m := range c.inflightKinds() {
		answered = answered || m == "SignedSuspect(by=s0)"
	}
	require.True(t, answered, "a late vote is answered with a vote: %v", c.inflightKinds())
}
