package core

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// docs/protocol.md change 67: a server that refuses a session because it
// knows a newer one of the client (or the session is reset) says how far
// the client's numbering has gone: the client's own signed open of the
// highest session it keeps, and the highest number it knows. A session it
// accepts, or one above everything it knows, gets nothing of the kind.
func TestARefusedSessionIsToldTheNumberingItMissed(t *testing.T) {
	c := newCluster(t, 4, 1)
	x := c.newClient()
	open := func(sess uint64) *wire.SessionAck {
		t.Helper()
		o, err := wire.SignOpen(x.key, c.keys.Cluster, sess, 2000)
		require.NoError(t, err)
		c.fromClient(0, x.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: sess, TTLMillis: 2000, Signed: &o}})
		replies := c.replies(x.id)
		require.Len(t, replies, 1)
		require.NotNil(t, replies[0].SessionAck)
		return replies[0].SessionAck
	}
	ack := open(40)
	require.True(t, ack.LeaseOK)
	require.Zero(t, ack.Known)
	require.Nil(t, ack.Newer)

	ack = open(6) // a process started without its counter
	require.False(t, ack.LeaseOK, "superseded")
	require.EqualValues(t, 40, ack.Known)
	require.NotNil(t, ack.Newer)
	b, err := ack.Newer.Verify(c.keys.Cluster)
	require.NoError(t, err)
	require.Equal(t, x.id, b.Client)
	require.EqualValues(t, 40, b.Session, "its own signed open of the newest session")

	ack = open(41)
	require.True(t, ack.LeaseOK)
	require.Zero(t, ack.Known, "a session above everything known is told nothing")
}
