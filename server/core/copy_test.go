package core

import (
	"cmp"
	"crypto/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// withCA remakes c's cores with a cluster CA, which signs epochs.
func (c *cluster) withCA() *crypto.PrivateKey {
	ca, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(c.t, err)
	c.clusterCA = ca
	for i := range c.cores {
		c.cores[i] = c.newCore(i, len(c.cores), c.cores[i].cfg.F)
	}
	return ca
}

// addServerFour starts server 4, the member epoch 1 adds (epochOneWith),
// as an operator starts it with its material: epoch 1 and its key.
func (c *cluster) addServerFour(ca *crypto.PrivateKey, tune func(*Config)) (*Core, wire.Epoch) {
	k4, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(c.t, err)
	one := c.epochOneWith(ca, k4)
	cfg := DefaultConfig(4, 4, 1, c.keys, k4)
	cfg.ClusterCA, cfg.Epochs = ca.Public, []wire.Epoch{one}
	if tune != nil {
		tune(&cfg)
	}
	s4 := c.newCoreOf(4, cfg)
	c.cores, c.signers, c.disks = append(c.cores, s4), append(c.signers, k4), append(c.disks, map[string]map[string][]byte{})
	return s4, one
}

// copyTo takes the Copy parts in flight to server to, in order.
func (c *cluster) copyTo(to wire.ServerID) []*wire.Copy {
	var out []*wire.Copy
	keep := c.inflight[:0]
	for _, m := range c.inflight {
		msg, err := wire.Decode(m.data)
		require.NoError(c.t, err)
		if m.to == to && msg.Copy != nil {
			out = append(out, msg.Copy)
		} else {
			keep = append(keep, m)
		}
	}
	c.inflight = keep
	return out
}

// docs/protocol.md change 43, the copy's sealed side: a server that sealed
// its epoch hands its state — register values (a Ticket with its J, a Held
// after its Ticket), each lock's hw, certificates and the clients' sessions
// — to a member of the newest epoch that asks, in numbered parts of one
// state, the last marked; a server that is no member of the newest epoch
// (server 3, removed) is not answered, nor is anyone before the seal.
func TestSealedServerHandsOutItsState(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	w, x, z := c.newClient(), c.newClient(), c.newClient()
	j := c.doorway(w, "L", 1, 1)
	tk := w.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	c.fromClient(0, w.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
	c.fromClient(0, w.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: w.stmt("L", 1, 1, wire.PhaseHeld, 1, nil)}})
	c.doorway(x, "M", 1, 1)
	c.doorway(z, "M", 1, 1)
	c.fromServer(0, 1, &wire.Message{Reset: c.certify(z.id, 1, c.cores[0].q)})
	c.drop()

	ask := &wire.Message{CopyRequest: &wire.CopyRequest{Epoch: 0}}
	c.fromServer(0, 4, ask)
	require.Empty(t, c.copyTo(4), "no copy before the seal")

	c.fromClient(0, x.id, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{c.epochOne(ca)})})
	c.drop()
	c.fromServer(0, 3, ask)
	require.Empty(t, c.copyTo(3), "server 3 is no member of epoch 1")
	c.fromServer(0, 4, &wire.Message{CopyRequest: &wire.CopyRequest{Epoch: 1}})
	require.Empty(t, c.copyTo(4), "epoch 1 is not the sealed one")

	c.fromServer(0, 4, ask)
	parts := c.copyTo(4)
	require.Len(t, parts, 1)
	c.fromServer(0, 4, ask)
	require.Empty(t, c.copyTo(4), "a member asking again at once is not sent the whole state again")
	c.now = c.now.Add(copyRetry / 2)
	c.fromServer(0, 4, ask)
	require.Len(t, c.copyTo(4), 1, "one that asks again after a while is")
	p := parts[0]
	require.Equal(t, uint64(1), p.Part)
	require.True(t, p.Last)
	require.Zero(t, p.Epoch)

	phases := map[wire.ClientID][]wire.Phase{}
	for _, f := range p.Registers {
		st, err := f.Statement.Verify(c.keys.Cluster)
		require.NoError(t, err)
		phases[st.Client] = append(phases[st.Client], st.Phase)
		if st.Phase == wire.PhaseTicket {
			require.Equal(t, j, f.J, "a Ticket goes with its J")
		}
	}
	require.Equal(t, map[wire.ClientID][]wire.Phase{w.id: {wire.PhaseTicket, wire.PhaseHeld}, x.id: {wire.PhaseDoorway}}, phases,
		"z's value was voided by its certificate")
	require.Len(t, p.HW, 1)
	require.Equal(t, tk.Signed.Body, p.HW[0].Signed.Body, "L's hw is w's Ticket")
	require.Len(t, p.Certs, 1)
	require.Equal(t, z.id, p.Certs[0].Client)
	sessions := map[wire.ClientID]wire.CopyClient{}
	for _, cc := range p.Clients {
		sessions[cc.Client] = cc
	}
	require.Equal(t, []wire.CopySession{{Session: 1, TTLMillis: 5000}}, sessions[w.id].Sessions)
	require.Equal(t, uint64(1), sessions[w.id].SpokeUpTo)
	require.Equal(t, uint64(1), sessions[z.id].ResetUpTo)

	// In small parts: numbered, the last marked, the same entries.
	small := c.cores[0].copyParts(0, 1)
	require.Greater(t, len(small), 5)
	var registers []wire.Forward
	for i, sp := range small {
		require.Equal(t, uint64(i+1), sp.Part)
		require.Equal(t, i == len(small)-1, sp.Last)
		registers = append(registers, sp.Registers...)
		b, err := wire.Encode(&wire.Message{Copy: sp})
		require.NoError(t, err)
		_, err = wire.Decode(b)
		require.NoError(t, err)
	}
	require.Equal(t, p.Registers, registers)
}

// docs/protocol.md change 43, seal and copy: server 3 is replaced by a new
// server 4 while w holds L and x waits. Every member of epoch 1 — the kept
// servers 0–2 and the new 4 — serves it only once it copied the sealed
// state of q members of epoch 0; then the holding, the waiter, L's hw and
// a certificate are at server 4, a new client's Ticket there is above the
// hw, w's lease runs a whole TTL from the copy's end, the removed server's
// votes count for nothing, and a restart of server 4 serves epoch 1 again.
func TestCopyCarriesTheLockAcrossAReplace(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	w, x, z := c.newClient(), c.newClient(), c.newClient()
	j := c.doorway(w, "L", 1, 1)
	tk := w.stmt("L", 1, 1, wire.PhaseTicket, 1, j)
	held := w.stmt("L", 1, 1, wire.PhaseHeld, 1, nil)
	for s := range 4 {
		c.fromClient(s, w.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j}})
		c.fromClient(s, w.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: held}})
	}
	c.doorway(x, "L", 1, 1)
	c.doorway(z, "M", 1, 1)
	c.flush()
	for s := range 4 {
		c.fromServer(s, 1, &wire.Message{Reset: c.certify(z.id, 1, 3)})
	}
	c.flush()
	c.toClients = nil

	// The new member starts with its material: epoch 1 and its key.
	s4, one := c.addServerFour(ca, nil)
	serves, knows := s4.Epoch()
	require.Equal(t, [2]uint64{0, 1}, [2]uint64{serves, knows}, "a new member serves nothing before its copy")
	c.fromClient(4, w.id, &wire.Message{GetSet: &wire.GetSet{Req: 4, Lock: "L"}})
	sealedAnswer(t, c.replies(w.id), 4, "the new member before its copy")

	// The operator shows epoch 1 to server 0; the news goes round, and
	// every member of epoch 1 copies.
	c.fromClient(0, x.id, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one})})
	c.effects(4, s4.Tick(c.now))
	c.flush()
	for _, s := range []int{0, 1, 2, 4} {
		serves, knows := c.cores[s].Epoch()
		require.Equal(t, [2]uint64{1, 1}, [2]uint64{serves, knows}, "server %d serves epoch 1", s)
		_, _, copying := c.cores[s].Copying()
		require.False(t, copying)
	}
	serves, knows = c.cores[3].Epoch()
	require.Equal(t, [2]uint64{0, 1}, [2]uint64{serves, knows}, "the removed server stays sealed")
	_, _, copying := c.cores[3].Copying()
	require.False(t, copying, "and copies nothing")

	require.Equal(t, wire.PhaseHeld, s4.Register("L", w.id).Phase, "the holding moved")
	require.Equal(t, wire.PhaseDoorway, s4.Register("L", x.id).Phase, "the waiter moved")
	require.Equal(t, uint64(1), s4.locks["L"].HW().St.N, "the hw moved")
	require.Equal(t, uint64(1), s4.mute.ResetUpTo(z.id), "the certificate moved")
	require.Nil(t, s4.Register("M", z.id))

	// A new client's GET-TICKET in epoch 1 at servers 0, 1 and 4: Views of
	// epoch 1, and a Ticket above the hw.
	y := c.newClient()
	d := y.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)
	var jy []wire.SignedView
	for _, s := range []int{0, 1, 4} {
		c.fromClient(s, y.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
		c.fromClient(s, y.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: d}})
	}
	for _, m := range c.replies(y.id) {
		if m.ViewReply != nil {
			jy = append(jy, m.ViewReply.View)
		}
	}
	require.Len(t, jy, 3)
	keys1, q1, ok := c.cores[4].chain.Keyring(1)
	require.True(t, ok)
	require.Equal(t, 3, q1)
	n, err := bakery.TicketFromJustification(jy, keys1, q1, bakery.Attempt{Lock: "L", Client: y.id, Session: 1, Attempt: 1}, s4.verify, nil)
	require.NoError(t, err)
	require.Equal(t, uint64(2), n, "above the hw that moved")
	c.fromClient(4, y.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: y.stmt("L", 1, 1, wire.PhaseTicket, 2, jy), J: jy}})
	require.Empty(t, errorCodes(c.replies(y.id)))
	require.Equal(t, wire.PhaseTicket, s4.Register("L", y.id).Phase)

	// w's lease at server 4 runs a whole TTL from the copy's end.
	end := c.now
	c.now = end.Add(4900 * time.Millisecond)
	c.effects(4, s4.Tick(c.now))
	require.False(t, s4.mute.Voted(w.id, 1), "no vote before a TTL from the copy's end")
	c.now = end.Add(5100 * time.Millisecond)
	c.effects(4, s4.Tick(c.now))
	require.True(t, s4.mute.Voted(w.id, 1), "w went silent: a vote once its lease ran out")
	c.drop()

	// "I still work here": the removed server's vote counts for nothing in
	// epoch 1. (Votes of epoch 0 make a certificate of epoch 0 only with
	// q_0 members of epoch 0, two correct ones here, which voted before
	// they sealed: a genuine certificate, which stays valid.)
	cert := &wire.ResetCertificate{Client: x.id, Session: 1}
	for _, s := range []int{0, 1, 3} {
		v, err := wire.SignSuspect(c.signers[s], c.keys.Cluster, &wire.SuspectBody{Client: x.id, Session: 1, Server: wire.ServerID(s), Reason: wire.SuspectMute, Epoch: 1})
		require.NoError(t, err)
		cert.Votes = append(cert.Votes, v)
	}
	c.fromServer(4, 0, &wire.Message{Reset: cert})
	require.NotNil(t, s4.Register("L", x.id), "a certificate with the removed server's vote")
	before := s4.mute.VoteCount(x.id, 1)
	c.fromServer(4, 3, &wire.Message{Suspect: &cert.Votes[2]})
	require.Equal(t, before, s4.mute.VoteCount(x.id, 1), "nor does its vote alone")

	// A restart of server 4 serves epoch 1, with what it copied.
	c.restart(4)
	s4 = c.cores[4]
	serves, knows = s4.Epoch()
	require.Equal(t, [2]uint64{1, 1}, [2]uint64{serves, knows})
	require.Equal(t, wire.PhaseHeld, s4.Register("L", w.id).Phase)
	require.Equal(t, wire.PhaseTicket, s4.Register("L", y.id).Phase)
}

// docs/protocol.md change 43, the copy's fault argument: x's Doorway was
// written at servers 1–3 only, and server 1 is faulty — it hands server 4
// an empty state that claims high counters for x. Server 4 serves epoch 1
// only with q = 3 whole reports of members of epoch 0: not on server 0's
// and the faulty one's alone, not on a part from a stranger, nor on a last
// part without the ones before it. With server 2's, x's Doorway is there,
// and x's counters are the (f+1)-th highest report, not the faulty one's.
func TestCopyNeedsQReportsOfTheSealedEpoch(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	x := c.newClient()
	d := x.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)
	for _, s := range []int{1, 2, 3} {
		c.fromClient(s, x.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
		c.fromClient(s, x.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: d}})
	}
	c.drop()
	c.toClients = nil

	s4, one := c.addServerFour(ca, func(cfg *Config) { cfg.MaxLocks, cfg.MaxBans = 2, 1 })
	news := &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one})}
	for s := range 4 {
		c.fromClient(s, x.id, news)
	}
	c.drop() // the kept servers' own copies are not this test's
	c.effects(4, s4.Tick(c.now))
	c.drop() // server 4's requests: the parts are delivered by hand

	ask := &wire.Message{CopyRequest: &wire.CopyRequest{Epoch: 0}}
	partsOf := func(s int) []*wire.Copy {
		c.fromServer(s, 4, ask)
		return c.copyTo(4)
	}
	serving := func() bool { serves, _ := s4.Epoch(); return serves == 1 }
	for _, p := range partsOf(0) {
		c.fromServer(4, 0, &wire.Message{Copy: p})
	}
	faulty := &wire.Copy{Epoch: 0, Part: 1, Last: true, Clients: []wire.CopyClient{{Client: x.id, SpokeUpTo: 99, ResetUpTo: 99}}}
	for range 4 { // more clients than server 4 keeps of one report (MaxLocks + MaxBans = 3)
		faulty.Clients = append(faulty.Clients, wire.CopyClient{Client: c.newClient().id, SpokeUpTo: 7})
	}
	// An hw without its J, of a lock no one else reports: one member's
	// word (change 47).
	faulty.HW = []wire.SignedStatement{x.stmt("M", 1, 1, wire.PhaseTicket, 5, nil)}
	c.fromServer(4, 1, &wire.Message{Copy: faulty})
	require.Len(t, s4.copying.clients[1], 3, "a report's clients are bounded")
	require.Nil(t, s4.locks["M"], "an hw without its J waits for the copy's end")
	c.fromServer(4, 9, &wire.Message{Copy: faulty})
	c.fromServer(4, 2, &wire.Message{Copy: &wire.Copy{Epoch: 0, Part: 2, Last: true}})
	require.False(t, serving(), "two whole reports, a stranger's and a last part alone are not q")
	_, done, copying := s4.Copying()
	require.True(t, copying)
	require.Equal(t, 2, done)

	c.effects(4, s4.Tick(c.now.Add(time.Second))) // server 4 asks again
	c.drop()
	for _, p := range partsOf(2) {
		c.fromServer(4, 2, &wire.Message{Copy: p})
	}
	require.True(t, serving())
	require.Equal(t, wire.PhaseDoorway, s4.Register("L", x.id).Phase, "the write of q members is in any q reports")
	require.Equal(t, uint64(1), s4.mute.SpokeUpTo(x.id), "the (f+1)-th highest report")
	require.Zero(t, s4.mute.ResetUpTo(x.id), "no faulty member ends a session alone")
	require.Nil(t, s4.locks["M"], "nor raises an hw alone")

	// Server 4 was no member of epoch 0: it hands out no copy of it.
	c.drop()
	c.fromServer(4, 0, ask)
	require.Empty(t, c.copyTo(0), "a copy of epoch 0 comes only from its members")

	// In epoch 1 a Ticket must come with a J of epoch 1: x's J of epoch 0
	// (Views by servers 1–3, genuine) is refused — with epoch-moved, after
	// the epochs: x is behind — and convicts nobody.
	var j0 []wire.SignedView
	for _, s := range []int{1, 2, 3} {
		v, err := wire.SignView(c.signers[s], c.keys.Cluster, &wire.ViewBody{Lock: "L", For: x.id, ForSession: 1, ForAttempt: 1, Server: wire.ServerID(s)})
		require.NoError(t, err)
		j0 = append(j0, v)
	}
	c.fromClient(4, x.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: x.stmt("L", 1, 1, wire.PhaseTicket, 1, j0), J: j0}})
	require.Equal(t, []wire.ErrorCode{wire.ErrCodeEpochMoved}, errorCodes(c.replies(x.id)))
	require.False(t, s4.Banned(x.id))
}

// docs/protocol.md change 43, the copy's liveness: a member whose state
// comes in many parts is not asked again while its parts keep coming,
// however long the whole takes (asking again restarts it); one that went
// quiet is asked again after copyRetry.
func TestCopyOfALargeStateIsNotRestarted(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	for range 3 {
		c.doorway(c.newClient(), "L", 1, 1)
	}
	c.drop()
	c.toClients = nil
	s4, one := c.addServerFour(ca, nil)
	news := &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one})}
	for s := range 4 {
		c.fromServer(s, 4, news)
	}
	c.drop()
	// asked counts the CopyRequests in flight, by server, and drops them.
	asked := func() map[wire.ServerID]int {
		n := map[wire.ServerID]int{}
		for _, m := range c.inflight {
			msg, err := wire.Decode(m.data)
			require.NoError(t, err)
			if msg.CopyRequest != nil {
				n[m.to]++
			}
		}
		c.drop()
		return n
	}
	c.effects(4, s4.Tick(c.now))
	require.Equal(t, map[wire.ServerID]int{0: 1, 1: 1, 2: 1, 3: 1}, asked())

	parts := c.cores[0].copyParts(0, 1) // in small parts: a large state
	require.Greater(t, len(parts), 3)
	quiet := 0
	for i, p := range parts {
		c.now = c.now.Add(copyRetry * 4 / 5)
		c.effects(4, s4.Tick(c.now))
		got := asked()
		require.Zero(t, got[0], "part %d: server 0's parts keep coming", i+1)
		quiet += got[1]
		c.fromServer(4, 0, &wire.Message{Copy: p})
	}
	_, done, _ := s4.Copying()
	require.Equal(t, 1, done, "server 0's whole state came, in %d parts over %v", len(parts), time.Duration(len(parts))*copyRetry*4/5)
	require.Equal(t, len(parts)/2, quiet, "server 1, quiet, is asked again every other Tick (each copyRetry)")
}

// docs/protocol.md change 43: a member that copied its way into the epoch
// says so with an empty Announce at the copy's end, and each peer answers
// with a resync, so what the peer took while the member was copying (which
// the member dropped, sealed) reaches it; a peer saying so over and over
// gets one resync per copyRetry/2. Found by the simulator (seed 1756: a
// silent client's Doorway that only the new member held was never voted on).
func TestPeerThatCopiedIsResynchronised(t *testing.T) {
	c := newCluster(t, 4, 1)
	x := c.newClient()
	c.fromClient(0, x.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	c.fromClient(0, x.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: x.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)}})
	c.drop()
	served := &wire.Message{Announce: &wire.Announce{}}
	c.fromServer(0, 1, served)
	require.Contains(t, strings.Join(c.inflightKinds(), " "), "Announce(have=1)", "server 1 is shown what server 0 holds")
	c.drop()
	c.fromServer(0, 1, served)
	require.Empty(t, c.inflight, "not again so soon")
	c.now = c.now.Add(copyRetry)
	c.fromServer(0, 1, served)
	require.NotEmpty(t, c.inflight)
}

// docs/protocol.md change 43, every member tells whoever is behind: a
// client names its epoch in each SessionOpen and Heartbeat, and a member
// serving a later epoch shows it the epochs after the one named — once per
// connection, however often the client names it again — and a peer that
// connects is shown the epochs too (a member down through the change).
func TestServingMemberTellsWhoeverIsBehind(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	c.replaceThree(ca)
	c.toClients = nil

	x := c.newClient()
	news := func() int {
		n := 0
		for _, m := range c.replies(x.id) {
			if m.EpochNews != nil {
				require.Len(t, m.EpochNews.Epochs, 1)
				n++
			}
		}
		return n
	}
	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ClientPeer(x.id)}))
	c.fromClient(0, x.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	require.Equal(t, 1, news(), "a SessionOpen of epoch 0 is shown epoch 1")
	c.fromClient(0, x.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 1}})
	c.fromClient(0, x.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 2}})
	require.Zero(t, news(), "once per connection")
	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputDisconnected, From: wire.ClientPeer(x.id)}))
	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ClientPeer(x.id)}))
	c.fromClient(0, x.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 3, Epoch: 1}})
	require.Zero(t, news(), "a client of epoch 1 is shown nothing")
	c.fromClient(0, x.id, &wire.Message{Heartbeat: &wire.Heartbeat{Session: 1, Seq: 4}})
	require.Equal(t, 1, news(), "a Heartbeat of epoch 0 on a new connection is shown epoch 1")
	for _, m := range []*wire.Message{
		{Read: &wire.Read{Req: 7, Lock: "L", Client: x.id}},
		{GetSet: &wire.GetSet{Req: 8, Lock: "L"}},
	} {
		// A reader may have no session: its reads name its epoch too.
		c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputDisconnected, From: wire.ClientPeer(x.id)}))
		c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ClientPeer(x.id)}))
		c.fromClient(0, x.id, m)
		require.Equal(t, 1, news(), "a %s of epoch 0 is shown epoch 1", m.Body())
	}

	c.drop()
	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ServerPeer(1)}))
	shown := 0
	for _, m := range c.inflight {
		msg, err := wire.Decode(m.data)
		require.NoError(t, err)
		if msg.EpochNews != nil && m.to == 1 {
			require.Len(t, msg.EpochNews.Epochs, 1)
			shown++
		}
	}
	require.Equal(t, 1, shown, "a peer that connects is shown the epochs")
}

// docs/protocol.md changes 43 and 57, votes across the copy: server 0
// voted on a silent session in epoch 0, and no certificate came of it. At
// the copy's end the session stays refused (no ack for it), and the vote of
// epoch 0 stays on the disk as it was; server 0 votes again, in epoch 1,
// only when the session's lease runs out a whole TTL later, and persists
// that vote. A restart meanwhile restores the session refused, and votes a
// whole TTL from the first tick.
func TestOwnVotesAreCastAgainATTLAfterTheCopysEnd(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	x := c.newClient()
	c.fromClient(0, x.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 1000}})
	c.now = c.now.Add(2 * time.Second)
	c.effects(0, c.cores[0].Tick(c.now))
	require.True(t, c.cores[0].mute.Voted(x.id, 1))
	c.drop()
	c.toClients = nil

	c.replaceThree(ca)
	epochOnDisk := func() uint64 {
		require.Len(t, c.disks[0][bucketVote], 1)
		for _, v := range c.disks[0][bucketVote] {
			var vote wire.SignedSuspect
			require.NoError(t, crypto.Unmarshal(v, &vote))
			var body wire.SuspectBody
			require.NoError(t, crypto.Unmarshal(vote.Signed.Body, &body))
			return body.Epoch
		}
		return 0
	}
	require.EqualValues(t, 0, epochOnDisk(), "the vote of epoch 0 stays as it was")
	require.Zero(t, c.cores[0].mute.VoteCount(x.id, 1), "no vote of epoch 1 at the copy's end")
	require.True(t, c.cores[0].mute.Voted(x.id, 1), "the session stays refused")

	c.restart(0)
	require.True(t, c.cores[0].mute.Voted(x.id, 1), "a restart restores it refused")
	require.Zero(t, c.cores[0].mute.VoteCount(x.id, 1))
	c.effects(0, c.cores[0].Tick(c.now)) // the first tick: a whole TTL from now
	c.effects(0, c.cores[0].Tick(c.now.Add(999*time.Millisecond)))
	require.EqualValues(t, 0, epochOnDisk(), "no vote of epoch 1 before the TTL ran out")
	c.effects(0, c.cores[0].Tick(c.now.Add(time.Second)))
	require.EqualValues(t, 1, epochOnDisk(), "the vote of epoch 1, persisted")
	require.Equal(t, 1, c.cores[0].mute.VoteCount(x.id, 1))
}

// replaceThree makes the change of epochOne — server 3 replaced by a new
// server 4 — and runs it to its end: every member of epoch 1 serves it.
func (c *cluster) replaceThree(ca *crypto.PrivateKey) {
	s4, one := c.addServerFour(ca, nil)
	c.fromClient(0, c.newClient().id, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one})})
	c.effects(4, s4.Tick(c.now))
	c.flush()
	for _, s := range []int{0, 1, 2, 4} {
		serves, _ := c.cores[s].Epoch()
		require.EqualValues(c.t, 1, serves, "server %d serves epoch 1", s)
	}
}

// docs/protocol.md change 43, the copy settles as a restart does: a client
// whose certificate the members compacted to a settled session (change 26)
// is, at a member that copied it so, on probation, as after a restart. Else
// a faulty server feeds that member a newer session of the client signed in
// advance, which the other correct members refuse (they are on probation),
// so no certificate can ever end it there (campaign seed 8413159).
func TestCopyPutsSettledClientsOnProbation(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	m := c.newClient()
	const lock = "L"
	for s := range 4 {
		c.fromServer(s, wire.ServerID((s+1)%4), &wire.Message{Forward: &wire.Forward{Statement: m.stmt(lock, 1, 1, wire.PhaseDoorway, 0, nil)}})
		c.fromServer(s, wire.ServerID((s+1)%4), &wire.Message{Reset: c.certify(m.id, 1, c.cores[0].q)})
	}
	c.drop()
	c.tick(0)
	c.tick(c.cores[0].mute.Retention())
	c.drop()
	for s := range 4 {
		require.Contains(t, c.disks[s][bucketSettled], string(m.id[:]), "server %d compacted the certificate", s)
	}
	c.toClients = nil
	c.replaceThree(ca)
	require.EqualValues(t, 1, c.cores[4].mute.ResetUpTo(m.id), "the new member copied the settled session")

	c.fromServer(4, 1, &wire.Message{Forward: &wire.Forward{Statement: m.stmt(lock, 2, 1, wire.PhaseDoorway, 0, nil)}})
	require.False(t, isMember(c.cores[4], lock, m.id), "session 2, only forwarded, is refused: m is on probation")
	require.EqualValues(t, 1, c.cores[4].Stats.ForwardsRefused)
}

// docs/protocol.md change 43, a removed member is no peer: past the epochs
// and the copy, a member takes nothing from a server that is no member of
// the epoch it serves — no forward, no announcement, no resync at connect
// (it shows it the epochs). Else a removed member, faulty in its old
// epoch, feeds the members statements as one more faulty server than the
// new epoch allows for: here a Doorway of a session signed in advance
// (campaign seeds 8413159, 8413651).
func TestRemovedMemberIsNoPeer(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	c.replaceThree(ca)
	c.drop()
	m := c.newClient()
	const lock = "L"
	st := m.stmt(lock, 1, 1, wire.PhaseDoorway, 0, nil)
	c.fromServer(0, 3, &wire.Message{Forward: &wire.Forward{Statement: st}})
	require.False(t, isMember(c.cores[0], lock, m.id), "a removed member's forward is not taken")
	c.fromServer(0, 3, &wire.Message{Announce: &wire.Announce{Items: []wire.StatementRef{{Lock: lock, Client: m.id, Session: 1, Attempt: 1, Phase: wire.PhaseDoorway}}}})
	require.Empty(t, c.inflightKinds(), "nor its announcement pulled")
	require.EqualValues(t, 2, c.cores[0].Stats.FromNonMembers)

	c.fromServer(0, 1, &wire.Message{Forward: &wire.Forward{Statement: st}})
	require.True(t, isMember(c.cores[0], lock, m.id), "a member's forward of the same is taken")
	c.drop()

	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ServerPeer(3)}))
	require.Equal(t, []string{"EpochNews(1 epochs, to 1)"}, c.inflightKinds(), "at connect it is shown the epochs, and nothing of the state")
	c.drop()
	c.effects(0, c.cores[0].Step(c.now, Input{Kind: InputConnected, From: wire.ServerPeer(1)}))
	require.Contains(t, c.inflightKinds(), "Announce(have=1)", "a member is shown the state")
}

// docs/protocol.md change 43, an epoch skipped: the operator signs epoch 1
// (server 3 replaced by 4) and epoch 2 (server 1 replaced by 5) before
// anyone served 1, and the servers learn both at once; server 2 is down.
// Each member of epoch 1 first copies into 1 — sealed already — from the
// members of 0, then each member of 2 copies into 2 from the members of 1.
// Server 1, a member of 1 only, catches up with 1 as well and hands its
// state on: with server 2 down, the copiers of 2 need it (q = 3 of 0, 1,
// 4). Found by the campaign (seed 43: a CA rotation, then a replace while
// a partition kept the rotation from being served; every copier of epoch 2
// asked members of epoch 1 that had nothing of it, for ever).
func TestCopyCatchesUpWithAnEpochNobodyServed(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	_, one := c.addServerFour(ca, nil)
	k5, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	var members []wire.EpochMember
	for _, id := range []int{0, 2, 4} {
		members = append(members, wire.EpochMember{ID: wire.ServerID(id), Address: "127.0.0.1:7000", Key: c.signers[id].Public.Wire, Cert: []byte{0x30}})
	}
	members = append(members, wire.EpochMember{ID: 5, Address: "127.0.0.1:7000", Key: k5.Public.Wire, Cert: []byte{0x30}})
	twoSigned, err := wire.SignEpoch(ca, &wire.EpochBody{Cluster: c.keys.Cluster, Number: 2, Prev: wire.EpochHash(one.Signed), Members: members, F: 1})
	require.NoError(t, err)
	two := c.endorse(twoSigned, 2, 0, 1, 2)
	cfg := DefaultConfig(5, 4, 1, c.keys, k5)
	cfg.ClusterCA, cfg.Epochs = ca.Public, []wire.Epoch{one, two}
	c.cores, c.signers, c.disks = append(c.cores, c.newCoreOf(5, cfg)), append(c.signers, k5), append(c.disks, map[string]map[string][]byte{})

	x := c.newClient()
	c.fromClient(0, x.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	c.fromClient(0, x.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: x.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)}})
	c.drop()
	news := &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one, two})}
	for _, s := range []int{0, 1, 3, 4} {
		c.fromClient(s, c.newClient().id, news)
	}
	const down = 2
	serving := func() bool {
		for _, s := range []int{0, 4, 5} {
			if serves, _ := c.cores[s].Epoch(); serves != 2 {
				return false
			}
		}
		return true
	}
	for round := 0; !serving() && round < 8; round++ {
		c.now = c.now.Add(copyRetry)
		for s, k := range c.cores {
			if s != down {
				c.effects(s, k.Tick(c.now))
			}
		}
		for len(c.inflight) > 0 {
			m := c.inflight[0]
			c.inflight = c.inflight[1:]
			if int(m.to) == down {
				continue
			}
			msg, err := wire.Decode(m.data)
			require.NoError(t, err)
			if a := msg.Announce; m.from == 1 && a != nil && !a.Want && len(a.Items) == 0 {
				t.Errorf("server 1, sealed in the epoch it caught up with, told server %d it serves", m.to)
			}
			c.effects(int(m.to), c.cores[m.to].Step(c.now, Input{From: wire.ServerPeer(m.from), Msg: msg}))
		}
	}
	for s, want := range map[int]uint64{0: 2, 4: 2, 5: 2, 1: 1, 3: 0} {
		serves, knows := c.cores[s].Epoch()
		require.EqualValues(t, 2, knows, "server %d knows epoch 2", s)
		require.Equal(t, want, serves, "server %d serves (or, sealed, holds the state of) epoch %d", s, want)
	}
	require.NotNil(t, c.cores[5].Register("L", x.id), "the Doorway of epoch 0 reached the new member of epoch 2")

	// Server 1, sealed in epoch 1, shows a peer that connects the newest
	// epochs it holds, epoch 1 among them (issue 54, item 4): a member down
	// across both changes, which knows epoch 0 only, can adopt 2 only after
	// 1, and the epochs after 1 alone would leave it behind for good.
	c.drop()
	c.effects(1, c.cores[1].Step(c.now, Input{Kind: InputConnected, From: wire.ServerPeer(down)}))
	require.Len(t, c.inflight, 1)
	msg, err := wire.Decode(c.inflight[0].data)
	require.NoError(t, err)
	require.NotNil(t, msg.EpochNews)
	require.Len(t, msg.EpochNews.Epochs, 2, "epochs 1 and 2")
	behind := c.newCoreOf(down, c.configs[down])
	_, err = behind.chain.Extend(msg.EpochNews.List())
	require.NoError(t, err)
	require.EqualValues(t, 2, behind.chain.Number(), "a member that knew epoch 0 only catches up from it")
}

// docs/protocol.md change 43: a session that f+1 reporters of the copy say
// its client closed starts ended at the copier — voted on at its first
// tick, keeping no newer session waiting — while one that f or fewer say
// so (a faulty reporter alone) gets a whole TTL, as any session given back.
func TestCopiedClosedSessionsStartEnded(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	x, y := c.newClient(), c.newClient()
	for _, cl := range []*client{x, y} {
		for s := range 4 {
			c.fromClient(s, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
		}
	}
	for _, s := range []int{0, 1} {
		c.fromClient(s, x.id, &wire.Message{SessionClose: &wire.SessionClose{Req: 2, Session: 1}})
	}
	c.fromClient(0, y.id, &wire.Message{SessionClose: &wire.SessionClose{Req: 2, Session: 1}})
	c.replies(x.id)
	c.replies(y.id)
	c.replaceThree(ca)
	s4 := c.cores[4]
	before := s4.Stats.VotesCast
	c.effects(4, s4.Tick(c.now.Add(time.Millisecond)))
	require.Equal(t, uint64(1), s4.Stats.VotesCast-before, "x's session, closed at two reporters, is voted on at once")
	require.False(t, s4.mute.LeaseOK(x.id, 1, c.now.Add(time.Millisecond)))
	require.True(t, s4.mute.LeaseOK(y.id, 1, c.now.Add(time.Millisecond)), "y's, closed at one reporter, has a whole TTL")
}

// epochsOneAndTwo signs epoch 1 (server 3 replaced by 4, k4) and epoch 2
// (server 1 replaced by 5, k5), each endorsed, as the operator makes them
// before anyone served 1.
func (c *cluster) epochsOneAndTwo(ca, k4, k5 *crypto.PrivateKey) (one, two wire.Epoch) {
	one = c.epochOneWith(ca, k4)
	var members []wire.EpochMember
	for id, key := range map[int]*crypto.Parsed{0: c.signers[0].Public, 2: c.signers[2].Public, 4: k4.Public, 5: k5.Public} {
		members = append(members, wire.EpochMember{ID: wire.ServerID(id), Address: "127.0.0.1:7000", Key: key.Wire, Cert: []byte{0x30}})
	}
	slices.SortFunc(members, func(a, b wire.EpochMember) int { return cmp.Compare(a.ID, b.ID) })
	twoSigned, err := wire.SignEpoch(ca, &wire.EpochBody{Cluster: c.keys.Cluster, Number: 2, Prev: wire.EpochHash(one.Signed), Members: members, F: 1})
	require.NoError(c.t, err)
	return one, c.endorse(twoSigned, 2, 0, 1, 2)
}

// docs/protocol.md change 43, the catch-up rule: a copy of epoch e is
// handed out only by a member that served e or caught up with it, never by
// one still behind it. Server 0 knows epochs 1 and 2 but has not copied
// into 1 yet (it sealed 0): asked for epoch 1 by server 5, a member of 2,
// it answers nothing. Else its state of epoch 0 would count as a report of
// epoch 1, missing every write completed in 1, and a copier of 2 that
// reads it among its q reports could miss a completed write (F1 counts
// members that accepted in 1, and server 0 accepted nothing there).
func TestACopyIsServedOnlyOfAnEpochCaughtUpWith(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	k4, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	k5, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	one, two := c.epochsOneAndTwo(ca, k4, k5)
	c.doorway(c.newClient(), "L", 1, 1)
	c.fromClient(0, c.newClient().id, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one, two})})
	c.drop()
	serves, knows := c.cores[0].Epoch()
	require.Equal(t, [2]uint64{0, 2}, [2]uint64{serves, knows}, "server 0 sealed epoch 0 and has not caught up with 1")

	c.fromServer(0, 5, &wire.Message{CopyRequest: &wire.CopyRequest{Epoch: 1}})
	require.Empty(t, c.copyTo(5), "no copy of epoch 1 from a member that has not caught up with it")
	c.fromServer(0, 4, &wire.Message{CopyRequest: &wire.CopyRequest{Epoch: 0}})
	require.NotEmpty(t, c.copyTo(4), "a copy of epoch 0, which it served and sealed, it hands out")
}

// docs/protocol.md change 43: a copier counts a member's report only once
// its last part came, never on its first. The members' states come in
// several parts each; after the first part of q of them the new member is
// still copying, and it serves only once their last parts came, with what
// the later parts held. Else a copy could end on q first parts: the
// registers, hws and sessions of every later part missing at the copier —
// a completed write lost.
func TestACopyCountsAMemberOnlyOnItsLastPart(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	var clients []*client
	for range 4 {
		cl := c.newClient()
		clients = append(clients, cl)
		c.doorway(cl, "L", 1, 1)
	}
	c.drop()
	c.toClients = nil
	s4, one := c.addServerFour(ca, nil)
	for s := range 4 {
		c.fromServer(s, 4, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one})})
	}
	c.drop()
	c.effects(4, s4.Tick(c.now))
	c.drop()
	parts := map[wire.ServerID][]*wire.Copy{}
	for s := range wire.ServerID(3) {
		parts[s] = c.cores[s].copyParts(0, 1) // in small parts: a large state
		require.Greater(t, len(parts[s]), 3)
		c.fromServer(4, s, &wire.Message{Copy: parts[s][0]})
	}
	_, done, copying := s4.Copying()
	require.True(t, copying, "q first parts end no copy")
	require.Zero(t, done, "no member's report counts before its last part")
	for s := range wire.ServerID(3) {
		for _, p := range parts[s][1:] {
			c.fromServer(4, s, &wire.Message{Copy: p})
		}
	}
	serves, _ := s4.Epoch()
	require.Equal(t, uint64(1), serves, "q members' last parts came")
	for _, cl := range clients {
		require.NotNil(t, s4.Register("L", cl.id), "every part's registers are at the copier")
	}
}

// docs/protocol.md change 43, "a removed member is no peer": that holds for
// a certificate too. A removed member shows a member of the new epoch a
// certificate of that epoch, valid on its own: it is counted as from a
// non-member and changes nothing; a member's message with the same
// certificate ends the session. Else a removed member, one of the f of its
// old epoch and no one in the new, would still move state there — the
// drip-feed source change 43 closed (campaign seeds 8413159, 8413651).
func TestARemovedMembersResetIsNotTaken(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	c.replaceThree(ca)
	c.drop()
	x := c.newClient()
	cert := &wire.ResetCertificate{Client: x.id, Session: 1}
	for _, s := range []int{0, 1, 2} {
		v, err := wire.SignSuspect(c.signers[s], c.keys.Cluster, &wire.SuspectBody{Client: x.id, Session: 1, Server: wire.ServerID(s), Reason: wire.SuspectMute, Epoch: 1})
		require.NoError(t, err)
		cert.Votes = append(cert.Votes, v)
	}
	keys1, q1, _ := c.cores[0].chain.Keyring(1)
	require.NoError(t, cert.Verify(keys1, q1), "a certificate of epoch 1, valid on its own")
	before := c.cores[0].Stats.FromNonMembers
	c.fromServer(0, 3, &wire.Message{Reset: cert})
	require.Zero(t, c.cores[0].mute.ResetUpTo(x.id), "the removed member's reset is not taken")
	require.Equal(t, before+1, c.cores[0].Stats.FromNonMembers)
	c.fromServer(0, 1, &wire.Message{Reset: cert})
	require.Equal(t, uint64(1), c.cores[0].mute.ResetUpTo(x.id), "a member's is")
}
