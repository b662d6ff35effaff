package bakery_test

import (
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/internal/testutil"
	"github.com/bq-lock/bq/wire"
)

// epochPair is a cluster of four (epoch 0) and its epoch 1, in which server
// 3 is replaced by server 4, signed by the cluster CA.
type epochPair struct {
	ca      *crypto.PrivateKey
	keys    wire.Keyring
	one     wire.Epoch // endorsed by servers 0–2 (change 49)
	signers map[wire.ServerID]*crypto.PrivateKey
}

func newEpochPair(t *testing.T) *epochPair {
	gen := func() *crypto.PrivateKey {
		k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
		require.NoError(t, err)
		return k
	}
	p := &epochPair{ca: gen()}
	var pubs []*crypto.Parsed
	signers := map[wire.ServerID]*crypto.PrivateKey{}
	for i := range 4 {
		k := gen()
		pubs = append(pubs, k.Public)
		if i < 3 {
			signers[wire.ServerID(i)] = k
		}
	}
	p.keys = wire.NewKeyring(1, pubs)
	var members []wire.EpochMember
	for i, k := range []*crypto.Parsed{pubs[0], pubs[1], pubs[2], gen().Public} {
		members = append(members, wire.EpochMember{ID: wire.ServerID(i + i/3), Address: "127.0.0.1:7000", Key: k.Wire, Cert: []byte{0x30}})
	}
	one, err := wire.SignEpoch(p.ca, &wire.EpochBody{Cluster: p.keys.Cluster, Number: 1, Prev: [32]byte(p.keys.Cluster), Members: members, F: 1})
	require.NoError(t, err)
	p.one = testutil.Endorse(one, p.keys.Cluster, 1, signers)
	p.signers = signers
	return p
}

func (p *epochPair) client(t *testing.T, epochs ...wire.Epoch) *bakery.Client {
	k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	c, err := bakery.NewClient(bakery.ClientConfig{Key: k, N: 4, F: 1, Keys: p.keys, TTL: 3 * time.Second, ClusterCA: p.ca.Public, Epochs: epochs})
	require.NoError(t, err)
	return c
}

func ack(sess uint64, seq uint64) *wire.Message { return ackIn(0, sess, seq) }

// ackIn is a correct server's ack of heartbeat seq sent in epoch e.
func ackIn(e, sess, seq uint64) *wire.Message {
	return &wire.Message{SessionAck: &wire.SessionAck{Session: sess, Seq: seq, LeaseOK: true, Epoch: e}}
}

// docs/protocol.md change 43, "I still work here": a client in epoch 1
// counts answers of epoch 1's members only — acks of the removed server 3
// give no guarantee — and sends to those members only.
func TestClientCountsOnlyItsEpochsMembers(t *testing.T) {
	p := newEpochPair(t)
	c := p.client(t, p.one)
	require.Equal(t, uint64(1), c.Epoch())
	now := time.Unix(1_000, 0)
	e, err := c.Start(now)
	require.NoError(t, err)
	var to []wire.ServerID
	for _, s := range e.Send {
		to = append(to, s.To)
	}
	require.Equal(t, []wire.ServerID{0, 1, 2, 4}, to)
	for _, s := range []wire.ServerID{0, 1, 3} {
		c.Step(now, s, ackIn(1, c.Session(), 0))
	}
	require.False(t, c.LeaseHolds(now), "the removed server's ack counts for nothing")
	c.Step(now, 4, ackIn(1, c.Session(), 0))
	require.True(t, c.LeaseHolds(now))
}

// docs/protocol.md change 43, (3): a client moved to a newer epoch keeps
// the guarantee its acks of the epoch before gave until acks of the new
// epoch's members give a longer one — the change never shortens a lease —
// and an epoch its CA did not sign moves it nowhere.
func TestEpochMoveKeepsTheLeaseGuarantee(t *testing.T) {
	p := newEpochPair(t)
	c := p.client(t)
	now := time.Unix(1_000, 0)
	_, err := c.Start(now)
	require.NoError(t, err)
	for s := range wire.ServerID(4) {
		c.Step(now, s, ack(c.Session(), 0))
	}
	until := c.LeaseValidUntil()
	require.True(t, c.LeaseHolds(now))

	forged := p.one
	forged.Signed.Sig = append([]byte(nil), forged.Signed.Sig...)
	forged.Signed.Sig[0] ^= 1
	c.Step(now, 0, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{forged})})
	require.Zero(t, c.Epoch(), "an epoch the CA did not sign moves nobody")
	c.Step(now, 0, &wire.Message{EpochNews: &wire.EpochNews{Epochs: []crypto.Signed{p.one.Signed}}})
	require.Zero(t, c.Epoch(), "nor one the CA signed that the members did not endorse (change 49)")

	later := now.Add(time.Second)
	e := c.Step(later, 0, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{p.one})})
	require.Equal(t, uint64(1), c.Epoch())
	require.Equal(t, until, c.LeaseValidUntil(), "the old epoch's guarantee is kept")
	require.True(t, c.LeaseHolds(later))
	opens := 0
	for _, s := range e.Send {
		if s.Msg.SessionOpen != nil {
			require.NotEqual(t, wire.ServerID(3), s.To)
			require.EqualValues(t, 1, s.Msg.SessionOpen.Epoch, "the SessionOpen names the client's epoch")
			opens++
		}
	}
	require.Equal(t, 4, opens, "the session is opened at the new epoch's members")
	// Acks of the old epoch's open, still in flight (change 50): their
	// number is the new open's, but they answer what was sent a second
	// earlier, and count for nothing now.
	for _, s := range []wire.ServerID{0, 1, 2} {
		c.Step(later, s, ack(c.Session(), 0))
	}
	require.Equal(t, until, c.LeaseValidUntil(), "an ack of the epoch before extends nothing")
	for _, s := range []wire.ServerID{0, 1, 4} {
		c.Step(later, s, ackIn(1, c.Session(), 0))
	}
	require.True(t, c.LeaseValidUntil().After(until), "acks of the new epoch extend it")
	beats := 0
	for _, s := range c.Tick(later.Add(time.Minute)).Send {
		if s.Msg.Heartbeat != nil {
			require.EqualValues(t, 1, s.Msg.Heartbeat.Epoch, "a Heartbeat names the client's epoch")
			beats++
		}
	}
	require.NotZero(t, beats)
}

// docs/protocol.md change 43, a client that starts with an old cluster
// file: sealed servers answer its SessionOpen with the newer epochs and an
// epoch-moved (no request id). Once it moved, those are no refusal of its
// session — two of them, out of four, made a real bqclient give up — and a
// member of its new epoch that is still copying gets the SessionOpen again
// shortly.
func TestEpochMovedIsNoSessionRefusal(t *testing.T) {
	p := newEpochPair(t)
	c := p.client(t)
	now := time.Unix(1_000, 0)
	_, err := c.Start(now)
	require.NoError(t, err)
	moved := func(s wire.ServerID) {
		c.Step(now, s, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{p.one})})
		c.Step(now, s, &wire.Message{Error: &wire.Error{Code: wire.ErrCodeEpochMoved, Detail: "sealed epoch 0"}})
	}
	moved(3) // the removed server
	moved(0) // a kept member still copying
	moved(4) // a new member still copying
	require.Equal(t, uint64(1), c.Epoch())
	require.NoError(t, c.SessionRefused())

	e := c.Tick(now.Add(50 * time.Millisecond))
	for _, s := range e.Send {
		require.Nil(t, s.Msg.SessionOpen, "not before the retry is due")
	}
	e = c.Tick(now.Add(150 * time.Millisecond))
	var to []wire.ServerID
	for _, s := range e.Send {
		if s.Msg.SessionOpen != nil {
			to = append(to, s.To)
		}
	}
	require.Equal(t, []wire.ServerID{0, 4}, to, "the copying members are asked again, the removed one never")
}

// docs/protocol.md change 43: a SessionClose that a member of the client's
// epoch refuses with epoch-moved (it is still copying) goes to it again
// shortly, and is no refusal of the close; the close waits for its ack too
// (as long as its caller waits) — else the closed session would live on
// there for a TTL, counting against the client's session limit.
func TestSessionCloseRetriedAtACopyingMember(t *testing.T) {
	p := newEpochPair(t)
	c := p.client(t, p.one)
	now := time.Unix(1_000, 0)
	_, err := c.Start(now)
	require.NoError(t, err)
	op, _ := c.CloseSession()
	var req uint64
	c.Step(now, 4, &wire.Message{Error: &wire.Error{Req: op, Code: wire.ErrCodeEpochMoved, Detail: "copying"}})
	c.Step(now, 3, &wire.Message{Error: &wire.Error{Req: op, Code: wire.ErrCodeEpochMoved, Detail: "removed"}})
	e := c.Tick(now.Add(150 * time.Millisecond))
	var to []wire.ServerID
	for _, s := range e.Send {
		if s.Msg.SessionClose != nil {
			to = append(to, s.To)
			req = s.Msg.SessionClose.Req
		}
	}
	require.Equal(t, []wire.ServerID{4}, to, "the copying member is asked again, the removed one never")
	require.Equal(t, op, req)
	released := func(s wire.ServerID) bool {
		for _, ev := range c.Step(now, s, &wire.Message{Ack: &wire.Ack{Req: op}}).Events {
			if ev.Op == op {
				return true
			}
		}
		return false
	}
	require.False(t, released(0))
	require.False(t, released(1))
	require.False(t, released(2), "q acks, but the copying member's is awaited too")
	require.True(t, released(4), "the copying member's ack ends the close")
}

// docs/protocol.md change 43: a Read or a GetSet that a member of the
// client's epoch refuses with epoch-moved (it is still copying) goes to it
// again shortly — with a faulty member among the others, the read needs
// that member's answer for its quorum (found by the campaign, seed
// 8400161). However often a member refuses, one retry of a request to it
// is pending at a time, and each refusal that schedules one shows the
// member the client's epochs: it may be behind, not copying, and a server
// refuses a Read or a GetSet naming an epoch it does not know.
func TestReadsRetriedAtACopyingMember(t *testing.T) {
	for _, session := range []bool{true, false} {
		t.Run(fmt.Sprintf("session=%v", session), func(t *testing.T) { readsRetriedAtACopyingMember(t, session) })
	}
}

// readsRetriedAtACopyingMember: without a session too (a reader's was
// reset; found by the campaign, seed 352), as a Read needs none.
func readsRetriedAtACopyingMember(t *testing.T, session bool) {
	p := newEpochPair(t)
	c := p.client(t, p.one)
	now := time.Unix(1_000, 0)
	if session {
		_, err := c.Start(now)
		require.NoError(t, err)
	}
	read, _ := c.Read("L", wire.ClientID{7})
	set, _ := c.GetSet("M")
	shown := 0
	for range 3 {
		for _, op := range []uint64{read, set} {
			for _, s := range c.Step(now, 4, &wire.Message{Error: &wire.Error{Req: op, Code: wire.ErrCodeEpochMoved, Detail: "copying"}}).Send {
				require.Equal(t, wire.ServerID(4), s.To)
				require.NotNil(t, s.Msg.EpochNews, "the refusing member is shown the epochs (it may be behind), nothing else")
				require.Len(t, s.Msg.EpochNews.Epochs, 1)
				shown++
			}
			require.Empty(t, c.Step(now, 3, &wire.Message{Error: &wire.Error{Req: op, Code: wire.ErrCodeEpochMoved, Detail: "removed"}}).Send)
		}
	}
	require.Equal(t, 2, shown, "once per retry scheduled")
	require.Equal(t, 2, c.PendingRetries(), "one retry per request and member, none to the removed one")
	require.Empty(t, c.Tick(now.Add(50*time.Millisecond)).Send, "not before the retry is due")
	e := c.Tick(now.Add(150 * time.Millisecond))
	var reads, sets []wire.ServerID
	for _, s := range e.Send {
		switch {
		case s.Msg.Read != nil && s.Msg.Read.Req == read && s.Msg.Read.Lock == "L" && s.Msg.Read.Client == (wire.ClientID{7}) && s.Msg.Read.Epoch == 1:
			reads = append(reads, s.To)
		case s.Msg.GetSet != nil && s.Msg.GetSet.Req == set && s.Msg.GetSet.Lock == "M" && s.Msg.GetSet.Epoch == 1:
			sets = append(sets, s.To)
		}
	}
	require.Equal(t, []wire.ServerID{4}, reads, "the Read goes to the copying member again, naming the client's epoch")
	require.Equal(t, []wire.ServerID{4}, sets, "the GetSet goes to the copying member again")
	require.Zero(t, c.PendingRetries())
}

// docs/protocol.md change 43: once the cluster changed, a client shows a
// server it (re)connects to the newest epochs before anything else — a
// member back from a partition that missed the change learns it from its
// first client, instead of refusing the client's Ticket, whose J is of an
// epoch it does not know yet, for ever (found by the campaign, seed
// 8410411). In epoch 0 nothing is sent.
func TestReconnectShowsTheEpochs(t *testing.T) {
	p := newEpochPair(t)
	for _, tc := range []struct {
		shown []wire.Epoch
		want  int
	}{{nil, 0}, {[]wire.Epoch{p.one}, 1}} {
		c := p.client(t, tc.shown...)
		now := time.Unix(1_000, 0)
		_, err := c.Start(now)
		require.NoError(t, err)
		e := c.Reconnected(now, 1)
		require.NotEmpty(t, e.Send)
		if tc.want == 0 {
			for _, s := range e.Send {
				require.Nil(t, s.Msg.EpochNews, "nothing to show in epoch 0")
			}
			continue
		}
		first := e.Send[0].Msg.EpochNews
		require.NotNil(t, first, "the epochs go first, before the SessionOpen")
		require.Len(t, first.Epochs, tc.want)
		require.Equal(t, wire.ServerID(1), e.Send[0].To)
	}
}

// docs/protocol.md change 43: a move sends every pending access again
// under a new request id and counts it afresh, with the new epoch's q, so
// no quorum mixes the answers of the old epoch (the removed member's among
// them) with the new one's, and an answer to the old request still in
// flight counts for nothing. Found by the campaign: seed 8435661 (a Read
// answered by the removed faulty member and a stale correct one before the
// move, and by a faulty new member after it, returned a value older than a
// completed write) and seed 8441704 (a push of the old subscription, which
// arrived after the move, was taken for the new one's snapshot).
func TestMoveRestartsPendingAccesses(t *testing.T) {
	p := newEpochPair(t)
	c := p.client(t)
	now := time.Unix(1_000, 0)
	_, err := c.Start(now)
	require.NoError(t, err)
	read, _ := c.Read("L", wire.ClientID{7})
	set, _ := c.GetSet("M")
	earlier := &wire.Statement{Lock: "N", Client: c.ID(), Session: 9, Attempt: 1, Phase: wire.PhaseTicket}
	exit, _, err := c.ExitEarlier("N", earlier)
	require.NoError(t, err)
	answer := func(s wire.ServerID, reqs [3]uint64) []bakery.Event {
		var events []bakery.Event
		events = append(events, c.Step(now, s, &wire.Message{ReadReply: &wire.ReadReply{Req: reqs[0]}}).Events...)
		events = append(events, c.Step(now, s, &wire.Message{Update: &wire.Update{Req: reqs[1], Lock: "M", Seq: 1}}).Events...)
		events = append(events, c.Step(now, s, &wire.Message{Ack: &wire.Ack{Req: reqs[2]}}).Events...)
		return events
	}
	old := [3]uint64{read, set, exit}
	for _, s := range []wire.ServerID{3, 1} {
		require.Empty(t, answer(s, old), "two answers of epoch 0 are no quorum")
	}
	e := c.Step(now, 0, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{p.one})})
	require.Equal(t, uint64(1), c.Epoch())
	var again [3]uint64
	for _, s := range e.Send {
		switch {
		case s.Msg.Read != nil:
			again[0] = s.Msg.Read.Req
		case s.Msg.GetSet != nil:
			again[1] = s.Msg.GetSet.Req
		case s.Msg.Submit != nil:
			again[2] = s.Msg.Submit.Req
		}
	}
	for i := range again {
		require.NotZero(t, again[i], "each pending access goes to the new members again")
		require.NotContains(t, old, again[i], "under a new request id")
	}
	for _, s := range []wire.ServerID{4, 0, 2} {
		require.Empty(t, answer(s, old), "answers to the requests of epoch 0, still in flight, count for nothing")
	}
	for _, s := range []wire.ServerID{4, 0} {
		require.Empty(t, answer(s, again), "answers of epoch 0 do not count towards a quorum of epoch 1")
	}
	done := map[uint64]bool{}
	for _, ev := range answer(1, again) {
		done[ev.Op] = true
	}
	require.Equal(t, map[uint64]bool{read: true, set: true, exit: true}, done, "three members of epoch 1 answered; the events name the operations as they began")
}

// docs/protocol.md change 64: a client shown two epochs of one number, each
// signed by the CA and endorsed by q members of the epoch before (keys
// beyond what bq tolerates leaked), ends every attempt — a holding is lost
// — and starts none: it cannot tell which epoch's members to believe. An
// epoch of a held number that does not verify changes nothing.
func TestAClientShownTwoEpochsOfANumberLocksNothing(t *testing.T) {
	p := newEpochPair(t)
	c := p.client(t, p.one)
	now := time.Unix(1_000, 0)
	_, err := c.Start(now)
	require.NoError(t, err)
	_, err = c.Lock(now, "L", false)
	require.NoError(t, err)

	k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	var members []wire.EpochMember
	for i := range 3 {
		members = append(members, wire.EpochMember{ID: wire.ServerID(i), Address: "127.0.0.1:7000", Key: p.keys.Servers[i].Wire, Cert: []byte{0x30}})
	}
	members = append(members, wire.EpochMember{ID: 5, Address: "127.0.0.1:7001", Key: k.Public.Wire, Cert: []byte{0x30}})
	signed, err := wire.SignEpoch(p.ca, &wire.EpochBody{Cluster: p.keys.Cluster, Number: 1, Prev: [32]byte(p.keys.Cluster), Members: members, F: 1})
	require.NoError(t, err)
	other := testutil.Endorse(signed, p.keys.Cluster, 1, p.signers)

	c.Step(now, 0, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{{Signed: other.Signed, Endorsements: other.Endorsements[:2]}})})
	require.NoError(t, c.EpochConflict(), "two endorsements of q prove nothing")
	require.NotZero(t, c.Attempt("L"))

	e := c.Step(now, 0, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{other})})
	require.ErrorIs(t, c.EpochConflict(), wire.ErrEpochConflict)
	require.Zero(t, c.Attempt("L"), "the attempt ended")
	require.Len(t, e.Events, 1)
	require.Equal(t, bakery.Failed, e.Events[0].Kind)
	require.ErrorIs(t, e.Events[0].Err, wire.ErrEpochConflict)
	_, err = c.Lock(now, "M", false)
	require.ErrorIs(t, err, wire.ErrEpochConflict, "no attempt starts")
}

// docs/protocol.md change 43, (3): after a move the lease guarantee rests
// on acks of q members of the new epoch, as any lease (§5): acks of two of
// its four members (q = 3) extend nothing beyond what the epoch before
// gave, the third does. Else a client would count its lease on q−1 acks,
// and q−1 ackers plus the f faulty members voting do not outnumber the
// rest: a certificate of the new epoch could end the session it holds in.
func TestAfterAMoveTheLeaseNeedsQAcksOfTheNewMembers(t *testing.T) {
	p := newEpochPair(t)
	c := p.client(t)
	now := time.Unix(1_000, 0)
	_, err := c.Start(now)
	require.NoError(t, err)
	for s := range wire.ServerID(4) {
		c.Step(now, s, ack(c.Session(), 0))
	}
	until := c.LeaseValidUntil()
	later := now.Add(time.Second)
	c.Step(later, 0, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{p.one})})
	require.Equal(t, uint64(1), c.Epoch())
	for _, s := range []wire.ServerID{0, 4} {
		c.Step(later, s, ackIn(1, c.Session(), 0))
		require.Equal(t, until, c.LeaseValidUntil(), "fewer than q acks of epoch 1 extend nothing (server %s)", s)
	}
	c.Step(later, 1, ackIn(1, c.Session(), 0))
	require.True(t, c.LeaseValidUntil().After(until), "q acks of epoch 1 do")
}
