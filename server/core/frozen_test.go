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
	require.Empty(t, updates(c, w.id), "within its grace the vote holds the Listen still (change 45)")
	c.fromClient(0, w.id, listen(5))
	require.Empty(t, updates(c, w.id), "a held Listen that comes within the grace is held too")
	c.now = c.now.Add(c.cores[0].cfg.FrozenGrace - 2*time.Millisecond)
	c.effects(0, c.cores[0].Tick(c.now))
	require.Empty(t, updates(c, w.id), "within its grace the vote holds the Listen still (change 45)")
	c.now = c.now.Add(time.Millisecond)
	c.effects(0, c.cores[0].Tick(c.now))

	got := updates(c, w.id)
	require.Len(t, got, 1, "the vote releases the held Listen once FrozenGrace old")
	require.True(t, got[0].Released && got[0].Last)
	require.Equal(t, uint64(5), got[0].Req)
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

// docs/protocol.md change 45: a member that dies is voted on by every server
// within a tick of the others. Each server holds its waiters' Listens for
// FrozenGrace after its own vote, so the certificate that the votes make
// meanwhile resets the member, and every held report names it absent, with
// the certificate, instead of showing its last value ahead of the waiter
// (which the waiter could pass only at its next renewal, a TTL later).
func TestVoteGraceLetsTheResetComeFirst(t *testing.T) {
	c := newCluster(t, 4, 1)
	w, x := c.newClient(), c.newClient()
	jx := c.doorway(x, "L", 1, 1) // sessions with a TTL of 5 s
	tx := x.stmt("L", 1, 1, wire.PhaseTicket, 1, jx)
	for s := range 4 {
		c.fromClient(s, x.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tx, J: jx}})
	}
	jw := c.doorway(w, "L", 1, 1)
	tw := w.stmt("L", 1, 1, wire.PhaseTicket, 2, jw)
	for s := range 4 {
		c.fromClient(s, w.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tw, J: jw}})
		c.fromClient(s, w.id, &wire.Message{Listen: &wire.Listen{Req: 3, Lock: "L", Session: 1, Attempt: 1, Members: []wire.ClientID{x.id}, Hold: true}})
	}
	c.flush()
	for _, u := range updates(c, w.id) {
		require.NotEqual(t, uint64(3), u.Req, "x holds ticket 1, ahead of w: every Listen is held")
	}

	// x dies: its lease runs out at every server at the same tick; each
	// votes, and the votes go round. w stays alive.
	c.now = c.now.Add(4 * time.Second)
	for s := range 4 {
		c.fromClient(s, w.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 1}})
	}
	c.now = c.now.Add(1200 * time.Millisecond)
	for s := range 4 {
		c.effects(s, c.cores[s].Tick(c.now))
		require.True(t, c.cores[s].mute.Voted(x.id, 1), "server %d voted", s)
	}
	c.flush()
	for s := range 4 {
		c.now = c.now.Add(c.cores[s].cfg.FrozenGrace)
		c.effects(s, c.cores[s].Tick(c.now))
	}
	var reports int
	for _, u := range updates(c, w.id) {
		if u.Req != 3 {
			continue
		}
		reports++
		require.True(t, u.Released)
		require.Equal(t, []wire.ClientID{x.id}, u.Absent, "the report names x absent: the reset came first")
		require.Len(t, u.Resets, 1, "with the certificate")
	}
	require.Equal(t, 4, reports, "every server released its held Listen")
}
