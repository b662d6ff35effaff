package core

import (
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// docs/protocol.md change 46: server 0 was away while its client closed
// four sessions at the others; servers 1 and 2 voted on each (f+1 votes, no
// certificate while server 3 is away too). Server 0 starts a lease on each
// on their word — it must still vote on them when they run out — but they
// do not count against max_sessions_per_client: the client's next session
// is accepted there.
func TestSessionsHeardOfOnVotesLeaveRoomForNewOnes(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	limit := uint64(c.cores[0].cfg.MaxSessionsPerClient)
	for sess := uint64(1); sess <= limit; sess++ {
		for _, s := range []int{1, 2} {
			c.fromClient(s, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: sess, TTLMillis: 2000}})
			c.fromClient(s, cl.id, &wire.Message{SessionClose: &wire.SessionClose{Req: sess, Session: sess}})
		}
	}
	c.replies(cl.id)
	c.drop()
	c.now = c.now.Add(50 * time.Millisecond)
	for _, s := range []int{1, 2} {
		c.effects(s, c.cores[s].Tick(c.now))
	}
	// Only server 0 hears the votes (server 3 is away).
	var toZero []serverMsg
	for _, m := range c.inflight {
		if m.to == 0 {
			toZero = append(toZero, m)
		}
	}
	c.inflight = toZero
	c.flush()
	for sess := uint64(1); sess <= limit; sess++ {
		require.Equal(t, 2, c.cores[0].mute.VoteCount(cl.id, sess), "session %d: f+1 votes at server 0", sess)
	}

	c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: limit + 1, TTLMillis: 2000}})
	var acked bool
	for _, m := range c.replies(cl.id) {
		if m.SessionAck != nil && m.SessionAck.Session == limit+1 {
			acked = m.SessionAck.LeaseOK
		}
		require.Nil(t, m.Error, "the sessions heard of leave room for a new one: %s", m)
	}
	require.True(t, acked, "the new session is accepted")

	// The sessions heard of are voted on when their leases run out.
	c.now = c.now.Add(c.cores[0].cfg.DefaultTTL + time.Second)
	c.fromClient(0, cl.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: limit + 1, Seq: 1}})
	e := c.cores[0].Tick(c.now)
	voted := map[uint64]bool{}
	for _, o := range e.Send {
		if o.Msg.Suspect != nil && !o.To.IsClient {
			var body wire.SuspectBody
			require.NoError(t, crypto.Unmarshal(o.Msg.Suspect.Signed.Body, &body))
			voted[body.Session] = true
		}
	}
	for sess := uint64(1); sess <= limit; sess++ {
		require.True(t, voted[sess], "server 0 votes on session %d heard of", sess)
	}
	require.False(t, voted[limit+1])
}
