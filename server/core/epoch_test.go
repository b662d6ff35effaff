package core

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/internal/testutil"

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

// epochOne signs epoch 1 of c — server 3 replaced by a new id 4 — and
// servers 0–2 endorse it (change 49).
func (c *cluster) epochOne(ca *crypto.PrivateKey) wire.Epoch {
	k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(c.t, err)
	return c.epochOneWith(ca, k)
}

// epochOneWith is epochOne with k as server 4's key.
func (c *cluster) epochOneWith(ca, k *crypto.PrivateKey) wire.Epoch {
	var members []wire.EpochMember
	for i, key := range []*crypto.Parsed{c.keys.Servers[0], c.keys.Servers[1], c.keys.Servers[2], k.Public} {
		members = append(members, wire.EpochMember{ID: wire.ServerID(i + i/3), Address: "127.0.0.1:7000", Key: key.Wire, Cert: []byte{0x30}})
	}
	s, err := wire.SignEpoch(ca, &wire.EpochBody{Cluster: c.keys.Cluster, Number: 1, Prev: [32]byte(c.keys.Cluster), Members: members, F: 1})
	require.NoError(c.t, err)
	return c.endorse(s, 1, 0, 1, 2)
}

// endorse is s, epoch n, endorsed by the given servers (members of epoch
// n−1) with their keys.
func (c *cluster) endorse(s crypto.Signed, n uint64, servers ...int) wire.Epoch {
	signers := map[wire.ServerID]*crypto.PrivateKey{}
	for _, i := range servers {
		signers[wire.ServerID(i)] = c.signers[i]
	}
	return testutil.Endorse(s, c.keys.Cluster, n, signers)
}

// sealedAnswer checks that ms is the answer of a server that sealed epoch 0
// to request req: the epochs after it, then ErrCodeEpochMoved.
func sealedAnswer(t *testing.T, ms []*wire.Message, req uint64, what string) {
	t.Helper()
	require.Len(t, ms, 2, what)
	require.NotNil(t, ms[0].EpochNews, what)
	require.Len(t, ms[0].EpochNews.Epochs, 1, what)
	require.NotNil(t, ms[1].Error, what)
	require.Equal(t, wire.ErrCodeEpochMoved, ms[1].Error.Code, what)
	require.Equal(t, req, ms[1].Error.Req, what)
}

// docs/protocol.md change 43, the seal: a server shown a valid epoch after
// its own persists it and seals its epoch — every request of a client of
// it is answered with the epochs after it and ErrCodeEpochMoved (a status
// aside), a held Listen is answered so, each peer is told once, a peer's
// statement or vote of the sealed epoch is dropped, no lease runs out and
// no vote is cast, while a certificate is still taken; and a restart from
// its disk finds it sealed. An epoch that does not verify seals nothing.
func TestSealAnswersNothingOfTheSealedEpoch(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	c.clusterCA = ca
	for i := range c.cores {
		c.cores[i] = c.newCore(i, 4, 1)
	}
	w, x := c.newClient(), c.newClient()
	j := c.doorway(w, "L", 1, 1)
	c.fromClient(0, w.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: w.stmt("L", 1, 1, wire.PhaseTicket, 1, j), J: j}})
	c.doorway(x, "L", 1, 1)
	c.flush()
	c.replies(w.id)
	c.replies(x.id)
	// w's held Listen waits on x's Doorway at server 0.
	c.fromClient(0, w.id, &wire.Message{Listen: &wire.Listen{Req: 3, Lock: "L", Session: 1, Attempt: 1, Members: []wire.ClientID{x.id}, Hold: true}})
	require.Empty(t, c.replies(w.id))
	c.drop()

	// An epoch signed by another key seals nothing.
	forged := c.epochOne(x.key)
	c.fromClient(0, x.id, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{forged})})
	require.Equal(t, []wire.ErrorCode{wire.ErrCodeRejected}, errorCodes(c.replies(x.id)))
	require.False(t, c.cores[0].sealed())
	require.Empty(t, c.disks[0][bucketEpoch])
	require.Empty(t, c.replies(w.id), "w's Listen is still held")
	require.Empty(t, c.inflight, "no peer is told anything")

	// The real one, shown by any client.
	one := c.epochOne(ca)
	c.fromClient(0, x.id, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one})})
	require.True(t, c.cores[0].sealed())
	serves, knows := c.cores[0].Epoch()
	require.Equal(t, [2]uint64{0, 1}, [2]uint64{serves, knows})
	require.Len(t, c.disks[0][bucketEpoch], 1, "the epoch is persisted")
	sealedAnswer(t, c.replies(w.id), 3, "the held Listen is answered with the epochs after")
	require.Empty(t, c.replies(x.id))
	// Each peer is told, and asked for its copy (server 0 is a member of
	// epoch 1: it copies epoch 0 before it serves).
	told, asked := map[wire.ServerID]int{}, map[wire.ServerID]int{}
	for _, m := range c.inflight {
		msg, err := wire.Decode(m.data)
		require.NoError(t, err)
		switch {
		case msg.EpochNews != nil:
			told[m.to]++
		case msg.CopyRequest != nil:
			require.Zero(t, msg.CopyRequest.Epoch)
			asked[m.to]++
		default:
			t.Fatalf("the seal sends peers %s", msg.Body())
		}
	}
	require.Equal(t, map[wire.ServerID]int{1: 2, 2: 2, 3: 2}, told)
	require.Equal(t, map[wire.ServerID]int{1: 1, 2: 1, 3: 1}, asked)
	c.drop()

	for _, m := range []*wire.Message{
		{SessionOpen: &wire.SessionOpen{Session: 2, TTLMillis: 5000}},
		{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 9}},
		{Submit: &wire.Submit{Req: 10, Statement: x.stmt("L", 1, 1, wire.PhaseExit, 0, nil)}},
		{Listen: &wire.Listen{Req: 11, Lock: "L", Session: 1, Attempt: 1, Members: []wire.ClientID{w.id}}},
		{GetSet: &wire.GetSet{Req: 12, Lock: "L"}},
		{Read: &wire.Read{Req: 13, Lock: "L", Client: w.id}},
	} {
		c.fromClient(0, x.id, m)
		sealedAnswer(t, c.replies(x.id), requestID(m), m.Body().String())
	}
	require.EqualValues(t, 2, c.cores[0].mute.SpokeUpTo(x.id),
		"the refused SessionOpen still says its client spoke in session 2 here (change 53): probation will not refuse that session's statements")
	// A SessionClose is taken: it ends the client's own lease here, which
	// the copy's end would otherwise start afresh for a whole TTL.
	require.True(t, c.cores[0].mute.LeaseOK(w.id, 1, c.now))
	c.fromClient(0, w.id, &wire.Message{SessionClose: &wire.SessionClose{Req: 14, Session: 1}})
	got := c.replies(w.id)
	require.Len(t, got, 1)
	require.NotNil(t, got[0].Ack, "a sealed server acks a SessionClose")
	require.EqualValues(t, 14, got[0].Ack.Req)
	c.cores[0].mute.RestartClocks(c.now)
	require.False(t, c.cores[0].mute.LeaseOK(w.id, 1, c.now), "and the session stays closed through the copy's end")
	require.Equal(t, wire.PhaseDoorway, c.cores[0].Register("L", x.id).Phase, "the Exit was not taken")
	c.fromClient(0, x.id, &wire.Message{Status: &wire.Status{Req: 15, Lock: "L"}})
	got = c.replies(x.id)
	require.Len(t, got, 2)
	require.NotNil(t, got[0].EpochNews, "a Status naming epoch 0 is shown epoch 1 (an observer follows)")
	require.NotNil(t, got[1].StatusReply, "a status is still answered")
	require.Equal(t, [2]uint64{0, 1}, [2]uint64{got[1].StatusReply.Serves, got[1].StatusReply.Knows}, "and says the server sealed epoch 0")
	c.fromClient(0, x.id, &wire.Message{Status: &wire.Status{Lock: "L"}})
	require.Empty(t, c.replies(x.id), "a probe (Req 0) is answered with epochs only, and those once")

	// A peer's statement of the sealed epoch is dropped; it was told once.
	c.fromServer(0, 1, &wire.Message{Forward: &wire.Forward{Statement: x.stmt("L", 1, 1, wire.PhaseExit, 0, nil)}})
	require.Equal(t, wire.PhaseDoorway, c.cores[0].Register("L", x.id).Phase)
	require.Empty(t, c.inflight, "peer 1 was told already")

	// No lease runs out at a sealed server, and it casts no vote.
	c.now = c.now.Add(time.Hour)
	c.effects(0, c.cores[0].Tick(c.now))
	require.Zero(t, c.cores[0].Stats.VotesCast)
	for _, m := range c.inflight {
		msg, err := wire.Decode(m.data)
		require.NoError(t, err)
		require.Nil(t, msg.Suspect)
	}
	c.drop()
	// A certificate still voids what it voids.
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(x.id, 1, c.cores[0].q)})
	require.Nil(t, c.cores[0].Register("L", x.id))

	// A restart from its disk finds it sealed.
	c.drop()
	c.restart(0)
	require.True(t, c.cores[0].sealed())
	c.fromClient(0, w.id, &wire.Message{GetSet: &wire.GetSet{Req: 16, Lock: "L"}})
	sealedAnswer(t, c.replies(w.id), 16, "after a restart")
	// Peers that reconnect are told, on every connection: what this server
	// told a peer before may have been lost with it (a peer that was down
	// when this server sealed; campaign seed 9111131, where it stayed in
	// epoch 0 to the end).
	for range 2 {
		c.drop()
		c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ServerPeer(2)}))
		require.Equal(t, []string{"EpochNews(1 epochs, to 1)"}, c.inflightKinds())
	}
}

// docs/protocol.md change 43: a server that does not know the epoch a Read
// or a GetSet names (it missed the change) refuses it with ErrCodeEpochMoved
// instead of answering from an older epoch's state, which must not count in
// a quorum of the newer one; a Read naming the epoch it knows is answered.
func TestBehindServerAnswersNoReadOfALaterEpoch(t *testing.T) {
	c := newCluster(t, 4, 1)
	c.withCA()
	w, x := c.newClient(), c.newClient()
	c.doorway(w, "L", 1, 1)
	c.flush()
	c.drop()
	c.replies(w.id)
	for _, named := range []uint64{1, 2} {
		for _, m := range []*wire.Message{
			{Read: &wire.Read{Req: 20 + named, Lock: "L", Client: w.id, Epoch: named}},
			{GetSet: &wire.GetSet{Req: 30 + named, Lock: "L", Epoch: named}},
		} {
			c.fromClient(0, x.id, m)
			got := c.replies(x.id)
			require.Len(t, got, 1, m.Body().String())
			require.NotNil(t, got[0].Error, "%s: a server behind the client answers nothing", m.Body())
			require.Equal(t, wire.ErrCodeEpochMoved, got[0].Error.Code)
			require.Equal(t, requestID(m), got[0].Error.Req)
		}
	}
	c.fromClient(0, x.id, &wire.Message{Read: &wire.Read{Req: 40, Lock: "L", Client: w.id}})
	got := c.replies(x.id)
	require.Len(t, got, 1)
	require.NotNil(t, got[0].ReadReply, "a Read naming the server's epoch is answered")
	require.NotNil(t, got[0].ReadReply.Statement)
}

// docs/protocol.md change 43: a Ticket whose J is of an epoch that ended
// before it arrived (its client's GET-TICKET completed just before the
// change) is refused with the epochs after the J's first and
// ErrCodeEpochMoved, so the client moves and starts over instead of taking
// the refusals for a failed access (found between real processes, growing
// 4 → 7 under lock loops).
func TestTicketOfAnEndedEpochShowsTheEpochs(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	x := c.newClient()
	j := c.doorway(x, "L", 1, 1) // Views of epoch 0
	c.flush()
	c.replaceThree(ca)
	c.toClients = nil
	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ClientPeer(x.id)}))
	c.fromClient(0, x.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: x.stmt("L", 1, 1, wire.PhaseTicket, 1, j), J: j}})
	got := c.replies(x.id)
	require.Len(t, got, 2)
	require.NotNil(t, got[0].EpochNews, "the epochs first")
	require.Len(t, got[0].EpochNews.Epochs, 1)
	require.NotNil(t, got[1].Error)
	require.Equal(t, wire.ErrCodeEpochMoved, got[1].Error.Code, "no rejection: the client starts over in the newest epoch")
	require.EqualValues(t, 2, got[1].Error.Req)
	require.False(t, c.cores[0].Banned(x.id))
}

// docs/protocol.md change 50: a SessionAck names the epoch of the
// SessionOpen or Heartbeat it answers, so that a client that moved on,
// whose heartbeat numbers started again, takes no ack of the epoch before
// for a newer heartbeat of its number.
func TestSessionAckNamesTheEpochItAnswers(t *testing.T) {
	c := newCluster(t, 4, 1)
	x := c.newClient()
	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ClientPeer(x.id)}))
	for _, m := range []*wire.Message{
		{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000, Epoch: 3}},
		{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 1, Epoch: 3}},
	} {
		c.fromClient(0, x.id, m)
		acks := 0
		for _, r := range c.replies(x.id) {
			if r.SessionAck != nil {
				require.EqualValues(t, 3, r.SessionAck.Epoch, "the ack of a %s", m.Body())
				acks++
			}
		}
		require.Equal(t, 1, acks)
	}
}

// docs/protocol.md change 55: a sealed server shows a client the epochs
// after the one the client names, not after its own. Server 0 served epoch
// 1 and sealed it for epoch 2; a client of epoch 0 that opens its session
// there is shown epochs 1 and 2 (epoch 2 alone it could not adopt), and
// one of epoch 2 is still shown what follows epoch 1.
func TestSealedServerShowsTheEpochsAfterTheClients(t *testing.T) {
	c := newClosedCluster(t, 4, 1)
	ca := c.withCA()
	one := c.clientCAEpoch(ca, 1, [32]byte(c.keys.Cluster), c.clientCA)
	two := c.clientCAEpoch(ca, 2, wire.EpochHash(one.Signed), c.clientCA)
	for s := range 4 {
		c.fromServer(s, wire.ServerID((s+1)%4), &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one})})
	}
	for range 10 {
		c.flush()
		c.tick(time.Second)
	}
	serves, _ := c.cores[0].Epoch()
	require.EqualValues(t, 1, serves)
	c.fromServer(0, 1, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{two})})
	serves, knows := c.cores[0].Epoch()
	require.Equal(t, [2]uint64{1, 2}, [2]uint64{serves, knows}, "sealed epoch 1, copying into 2")

	x := c.newClient()
	c.connect(x, windowed(&wire.AdmissionBody{Name: "x", Client: x.id, Locks: []string{"*"}}))
	for _, named := range []uint64{0, 2} {
		c.fromClient(0, x.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1 + named, TTLMillis: 5000, Epoch: named}})
		var news *wire.EpochNews
		for _, m := range c.replies(x.id) {
			if m.EpochNews != nil {
				news = m.EpochNews
			}
		}
		require.NotNil(t, news, "epoch %d", named)
		want := 2
		if named == 2 {
			want = 1 // never fewer than the epochs after this server's own
		}
		require.Len(t, news.Epochs, want, "a client of epoch %d", named)
	}
}
