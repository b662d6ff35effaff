package core

import (
	"testing"
	"time"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// tick advances the clock by d and ticks every core.
func (c *cluster) tick(d time.Duration) {
	c.now = c.now.Add(d)
	for s, k := range c.cores {
		c.effects(s, k.Tick(c.now))
	}
}

// inflightKinds renders the server-to-server messages in flight.
func (c *cluster) inflightKinds() []string {
	var out []string
	for _, m := range c.inflight {
		msg, err := wire.Decode(m.data)
		require.NoError(c.t, err)
		out = append(out, msg.String())
	}
	return out
}

// A statement that reached one server only is announced after AnnounceDelay,
// pulled by every server that lacks it, and accepted there (§3.5, change 11).
func TestAnnounceThenPull(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	d := cl.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)
	c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: d}})
	require.Empty(t, c.inflightKinds(), "nothing goes to the other servers at once")

	delay := c.cores[0].cfg.AnnounceDelay
	c.tick(delay / 2)
	require.Empty(t, c.inflightKinds(), "nothing before AnnounceDelay")
	c.tick(delay)
	require.Equal(t, []string{"Announce(have=1)", "Announce(have=1)", "Announce(have=1)"}, c.inflightKinds())
	c.flush()
	for s, k := range c.cores {
		st := k.Register("L", cl.id)
		require.NotNil(t, st, "server %d", s)
		require.Equal(t, wire.PhaseDoorway, st.Phase, "server %d", s)
	}
	require.Equal(t, uint64(3), c.cores[1].Stats.Pulled+c.cores[2].Stats.Pulled+c.cores[3].Stats.Pulled)
}

// On the common path the client reached every server itself: the
// announcements cost one reference per statement, and nothing is pulled.
func TestAnnounceWhenEveryServerHasItPullsNothing(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	j := c.doorway(cl, "L", 1, 1)
	tk := cl.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	for s := range c.cores {
		c.fromClient(s, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	}
	c.tick(c.cores[0].cfg.AnnounceDelay)
	kinds := c.inflightKinds()
	require.Len(t, kinds, 12, "one Announce from each server to each other server")
	for _, k := range kinds {
		require.Equal(t, "Announce(have=2)", k, "the Doorway and the Ticket, as references")
	}
	c.flush()
	require.Empty(t, c.inflight)
	for s, k := range c.cores {
		require.Zero(t, k.Stats.Pulled, "server %d", s)
		st := k.Register("L", cl.id)
		require.Equal(t, wire.PhaseTicket, st.Phase)
	}
}

// Two different statements with one timestamp, each sent to different
// servers: the announced body hash differs, the statement is pulled, and
// every server bans the client (§6) as eager forwarding did.
func TestAnnounceFindsEquivocation(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	j := c.doorway(cl, "L", 1, 1)
	j2 := []wire.SignedView{j[1], j[0], j[2]}
	a := cl.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	b := cl.stmt("L", 1, 1, wire.PhaseTicket, 1, j2)
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: a, J: j}})
	c.fromClient(1, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: b, J: j2}})
	c.tick(c.cores[0].cfg.AnnounceDelay)
	c.flush()
	for s, k := range c.cores {
		require.True(t, k.Banned(cl.id), "server %d", s)
	}
}

// A faulty server that announces statements nobody signed only makes a
// correct server ask it for them; nothing is applied.
func TestAnnounceOfUnknownStatementIsHarmless(t *testing.T) {
	c := newCluster(t, 4, 1)
	ghost := c.newClient()
	c.fromServer(0, 3, &wire.Message{Announce: &wire.Announce{Items: []wire.StatementRef{
		{Lock: "L", Client: ghost.id, Session: 9, Attempt: 9, Phase: wire.PhaseTicket}}}})
	require.Equal(t, []string{"Announce(want=1)"}, c.inflightKinds())
	c.drop()
	st := c.cores[0].Register("L", ghost.id)
	require.Nil(t, st)
	// And a Want for something this server does not hold is answered with nothing.
	c.fromServer(0, 3, &wire.Message{Announce: &wire.Announce{Want: true, Items: []wire.StatementRef{
		{Lock: "L", Client: ghost.id, Session: 9, Attempt: 9, Phase: wire.PhaseTicket}}}})
	require.Empty(t, c.inflightKinds())
}

// Only messages that report signed objects may leave before the commit
// (change 12); everything that acknowledges waits.
func TestReportsClassification(t *testing.T) {
	to := wire.ServerPeer(1)
	reports := []*wire.Message{
		{Update: &wire.Update{Lock: "L"}}, {Forward: &wire.Forward{}}, {Announce: &wire.Announce{}},
		{Reset: &wire.ResetCertificate{}}, {Evidence: &wire.Evidence{}},
	}
	for _, m := range reports {
		require.True(t, Outgoing{To: to, Msg: m}.Reports(), "%s", m)
	}
	acks := []*wire.Message{
		{ViewReply: &wire.ViewReply{}}, {MembersReply: &wire.MembersReply{}}, {Ack: &wire.Ack{}},
		{SessionAck: &wire.SessionAck{}}, {Suspect: &wire.SignedSuspect{}}, {Error: &wire.Error{}},
		{ReadReply: &wire.ReadReply{}}, {StatusReply: &wire.StatusReply{}},
	}
	for _, m := range acks {
		require.False(t, Outgoing{To: to, Msg: m}.Reports(), "%s", m)
	}
}

// A View carries one member statement, the highest numbered, however many
// clients are members (docs/protocol.md change 16).
func TestViewCarriesOnlyTheHighestNumberedMember(t *testing.T) {
	c := newCluster(t, 4, 1)
	var clients []*client
	for i := range 5 {
		cl := c.newClient()
		clients = append(clients, cl)
		j := c.doorway(cl, "L", 1, 1)
		if i < 3 { // three take tickets, two stay in their Doorway
			tk := cl.stmt("L", 1, 1, wire.PhaseTicket, uint64(i+1), j)
			for s := range c.cores {
				c.fromClient(s, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
			}
		}
	}
	for _, m := range c.replies(clients[4].id) {
		require.Nil(t, m.Error, "%s", m)
	}
	late := c.newClient()
	j := c.doorway(late, "L", 1, 1)
	for _, v := range j {
		body, err := v.Verify(c.keys)
		require.NoError(t, err)
		require.Len(t, body.Members, 1)
		st, err := body.Members[0].Verify(c.keys.Cluster)
		require.NoError(t, err)
		require.Equal(t, clients[2].id, st.Client)
		require.Equal(t, uint64(3), st.N)
	}
}

// A reconnect resynchronises by reference too (change 11): the peer pulls
// only the register values it lacks.
func TestResyncAnnouncesAndPeerPullsWhatItLacks(t *testing.T) {
	c := newCluster(t, 4, 1)
	a, b := c.newClient(), c.newClient()
	c.doorway(a, "L", 1, 1) // every server has a's Doorway
	db := b.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)
	for s := range 3 { // server 3 misses b's Doorway
		c.fromClient(s, b.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
		c.fromClient(s, b.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: db}})
	}
	c.drop()
	c.now = c.now.Add(time.Millisecond)
	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ServerPeer(3)}))
	require.Equal(t, []string{"Announce(have=2)"}, c.inflightKinds(), "references, not Forwards")
	c.flush()
	require.Equal(t, uint64(1), c.cores[3].Stats.Pulled, "only b's Doorway")
	st := c.cores[3].Register("L", b.id)
	require.NotNil(t, st)
	require.Equal(t, wire.PhaseDoorway, st.Phase)
}

// A client statement older than the one held (a late copy, a resend) is
// answered as before but counted as stale, not as a refusal.
func TestStaleStatementCountedApart(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	j := c.doorway(cl, "L", 1, 1)
	tk := cl.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	ex := cl.stmt("L", 1, 1, wire.PhaseExit, 0, nil)
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: ex}})
	c.replies(cl.id)
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	got := c.replies(cl.id)
	require.Len(t, got, 1)
	require.NotNil(t, got[0].Error)
	require.Equal(t, uint64(1), c.cores[0].Stats.Stale)
	require.Zero(t, c.cores[0].Stats.Rejected)
}

// J is persisted with its Ticket: a server restarted from its disk can still
// hand the Ticket to a peer that lacks it, and drops J with the Exit.
func TestJustificationSurvivesRestart(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	j := c.doorway(cl, "L", 1, 1)
	tk := cl.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	for s := range 3 { // server 3 misses the Ticket
		c.fromClient(s, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	}
	c.drop()
	c.restart(0)
	c.fromServer(0, 3, &wire.Message{Announce: &wire.Announce{Want: true, Items: []wire.StatementRef{
		{Lock: "L", Client: cl.id, Session: 1, Attempt: 1, Phase: wire.PhaseTicket}}}})
	require.Equal(t, []string{"Forward(J=3)"}, c.inflightKinds(), "the restarted server still has J")
	c.flush()
	st := c.cores[3].Register("L", cl.id)
	require.Equal(t, wire.PhaseTicket, st.Phase)

	ex := cl.stmt("L", 1, 1, wire.PhaseExit, 0, nil)
	c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: ex}})
	require.Empty(t, c.disks[0][bucketJust], "J leaves the disk with the Exit")
}

// A Want lost on the way out (the peer's send queue was full, Repair) is
// asked again at the next resync with that peer, as long as this server
// still lacks what it names; once it has it, or of a peer it never asked,
// a resync asks nothing (change 35). Found by the simulator (seed 8116117:
// both correct servers' Wants to s0 overflowed, so only s0 ever knew a
// sybil's session, no certificate could form, and the lock stalled).
func TestLostWantAskedAgainAtResync(t *testing.T) {
	c := newCluster(t, 4, 1)
	b := c.newClient()
	d := b.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)
	c.fromClient(0, b.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	c.fromClient(0, b.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: d}})
	c.tick(c.cores[0].cfg.AnnounceDelay)
	wants := func() (n int) {
		for _, m := range c.inflight {
			msg, err := wire.Decode(m.data)
			require.NoError(t, err)
			if msg.Announce != nil && msg.Announce.Want {
				require.Equal(t, wire.ServerID(0), m.to)
				n += len(msg.Announce.Items)
			}
		}
		return n
	}
	// Server 1 hears the Announce; its Want is lost, and so is the rest.
	var toOne serverMsg
	for _, m := range c.inflight {
		if m.to == 1 {
			toOne = m
		}
	}
	c.drop()
	msg, err := wire.Decode(toOne.data)
	require.NoError(t, err)
	c.fromServer(1, 0, msg)
	require.Equal(t, 1, wants())
	c.drop()
	require.Nil(t, c.cores[1].Register("L", b.id))

	resync := func(s int, peer wire.ServerID) {
		c.now = c.now.Add(time.Millisecond)
		c.effects(s, c.cores[s].Step(c.now, Input{Kind: InputConnected, From: wire.ServerPeer(peer)}))
	}
	resync(1, 2)
	require.Zero(t, wants(), "server 2 was never asked")
	c.drop()
	resync(1, 0)
	require.Equal(t, 1, wants(), "asked again")
	c.flush()
	st := c.cores[1].Register("L", b.id)
	require.NotNil(t, st)
	require.Equal(t, wire.PhaseDoorway, st.Phase)
	resync(1, 0)
	require.Zero(t, wants(), "it has it now")
	c.drop()
}

// What a server remembers of its Wants to one peer is bounded.
func TestWantedIsBounded(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[1]
	refs := make([]wire.StatementRef, wire.MaxAnnounceItems)
	for i := range refs {
		refs[i] = wire.StatementRef{Lock: "L", Session: uint64(i + 1), Attempt: 1}
	}
	var e Effects
	k.askFor(0, refs, &e)
	k.askFor(0, refs[:10], &e)
	require.Len(t, k.wanted[0], wire.MaxAnnounceItems)
	require.Equal(t, refs[:10], k.wanted[0][wire.MaxAnnounceItems-10:], "the latest kept")
}
