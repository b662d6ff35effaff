package core

import (
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// updates takes the Updates that servers sent to client id so far.
func updates(c *cluster, id wire.ClientID) []*wire.Update {
	var out []*wire.Update
	for _, m := range c.replies(id) {
		if m.Update != nil {
			out = append(out, m.Update)
		}
	}
	return out
}

// docs/protocol.md change 42: a member whose session this server voted on
// does not hold a Listen here. x's Doorway sits at server 0; w's held Listen
// waits on it until server 0 votes on x's session (its lease ran out), is
// released then with x's Doorway in it, and a held Listen that comes later
// is answered at once.
func TestVotedSessionDoesNotHoldAListen(t *testing.T) {
	c := newCluster(t, 4, 1)
	w, x := c.newClient(), c.newClient()
	j := c.doorway(w, "L", 1, 1)
	tk := w.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	c.fromClient(0, w.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	c.fromClient(0, x.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	c.fromClient(0, x.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: x.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)}})
	c.drop()
	c.replies(w.id)

	listen := func(req uint64) *wire.Message {
		return &wire.Message{Listen: &wire.Listen{Req: req, Lock: "L", Session: 1, Attempt: 1, Members: []wire.ClientID{x.id}, Hold: true}}
	}
	c.fromClient(0, w.id, listen(3))
	require.Empty(t, updates(c, w.id), "x chooses at server 0: the Listen is held")

	// w stays alive at server 0; x goes silent.
	c.now = c.now.Add(4 * time.Second)
	c.fromClient(0, w.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 1}})
	c.now = c.now.Add(1500 * time.Millisecond)
	c.effects(0, c.cores[0].Tick(c.now))
	require.True(t, c.cores[0].mute.Voted(x.id, 1), "server 0 voted on x's session")
	require.False(t, c.cores[0].mute.Voted(w.id, 1))

	got := updates(c, w.id)
	require.Len(t, got, 1, "the vote releases the held Listen")
	require.True(t, got[0].Released && got[0].Last)
	require.Equal(t, uint64(3), got[0].Req)
	require.Len(t, got[0].Statements, 1, "the report shows x's value as it is")
	var st wire.Statement
	require.NoError(t, crypto.Unmarshal(got[0].Statements[0].Signed.Body, &st))
	require.Equal(t, x.id, st.Client)
	require.Equal(t, wire.PhaseDoorway, st.Phase)

	c.fromClient(0, w.id, listen(4))
	got = updates(c, w.id)
	require.Len(t, got, 1, "a held Listen that comes after the vote is answered at once")
	require.True(t, got[0].Released)
	require.Equal(t, uint64(4), got[0].Req)
}
