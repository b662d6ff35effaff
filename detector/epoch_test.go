package detector

import (
	"crypto/rand"

	"github.com/bq-lock/bq/crypto"
	"testing"
	"time"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// docs/protocol.md change 43: a detector votes in its epoch, and votes of
// another epoch — genuine ones, by the same keys — are no votes here: they
// make no certificate, and they are no evidence against their signer.
func TestVotesAreCastAndCountedInTheDetectorsEpoch(t *testing.T) {
	const n, q, e = 4, 3, 2
	ttl := time.Second
	f := newFixtureIn(t, e, n, q, ttl)
	c := clientID(t)
	t0 := time.Unix(0, 0)
	for s := range n {
		mustOpen(t, f.dets[s], c, 1, ttl, t0)
	}
	var votes []wire.SignedSuspect
	for now := t0; len(votes) < n && now.Before(t0.Add(10*ttl)); now = now.Add(ttl / 4) {
		for s := range n {
			votes = append(votes, f.dets[s].Tick(now)...)
		}
	}
	require.Len(t, votes, n, "every detector voted on the silent session")
	for _, v := range votes {
		body, err := v.Verify(f.keys)
		require.NoError(t, err)
		require.EqualValues(t, e, body.Epoch, "a vote names its signer's epoch")
	}

	// The same keys' votes of epoch 0 count for nothing in epoch 2.
	other := clientID(t)
	for s := range n {
		old, err := wire.SignSuspect(f.signers[s], f.keys.Cluster, &wire.SuspectBody{Client: other, Session: 1, Server: wire.ServerID(s), Reason: wire.SuspectMute})
		require.NoError(t, err)
		_, cert, err := f.dets[0].AddVote(old)
		require.ErrorIs(t, err, wire.ErrOtherEpoch)
		require.Nil(t, cert)
	}
	require.Zero(t, f.dets[0].ResetUpTo(other))
}

// docs/protocol.md changes 43 and 57, the copy's end: votes of the old
// epoch that no certificate used are dropped; this server's own stay
// promises — their sessions stay refused (no ack for them here, as promised
// at the first vote) — and are cast again in the new epoch when the
// sessions' leases run out, a whole TTL from the copy's end, not at once
// (campaign seed 4008282: a kept member's vote cast at once, a faulty
// member's and the new members' copied leases, which give way to f+1 votes,
// made a certificate while the client's guarantee of the epoch before still
// held). Without them no certificate of the new epoch would end the
// sessions (seeds 8400219, 8400197, 8400042). Votes of the new epoch make
// its certificate.
func TestCopyEndVotesAgainATTLLater(t *testing.T) {
	const n, q = 4, 3
	ttl := time.Second
	f := newFixture(t, n, q, ttl)
	c := clientID(t)
	t0 := time.Unix(0, 0)
	for s := range n {
		mustOpen(t, f.dets[s], c, 1, ttl, t0)
	}
	var votes []wire.SignedSuspect
	for s := range 2 { // two votes of epoch 0: no certificate
		votes = append(votes, f.dets[s].Tick(t0.Add(3*ttl))...)
	}
	require.Len(t, votes, 2)
	require.Empty(t, f.gossip(t, votes))

	next := f.keys
	next.Epoch = 1
	end := t0.Add(3 * ttl) // the copy's end
	for s := range n {
		f.dets[s].SetEpoch(next, q)
		f.dets[s].RestartClocks(end)
		require.Zero(t, f.dets[s].VoteCount(c, 1), "server %d dropped the votes of epoch 0, its own too", s)
	}
	require.Error(t, f.dets[0].Heartbeat(c, 1, end), "the session stays refused where this server voted")
	require.True(t, f.dets[0].Voted(c, 1))
	f.keys = next
	for s := range n {
		require.Empty(t, f.dets[s].Tick(end.Add(ttl-time.Millisecond)), "server %d votes in epoch 1 no sooner than a TTL after the copy's end", s)
	}
	var revotes []wire.SignedSuspect
	for s := range n {
		v := f.dets[s].Tick(end.Add(ttl))
		require.Len(t, v, 1, "server %d votes in epoch 1 once the lease runs out", s)
		body, err := v[0].Verify(next)
		require.NoError(t, err)
		require.Equal(t, [2]uint64{1, 1}, [2]uint64{body.Epoch, body.Session})
		revotes = append(revotes, v...)
	}
	certs := f.gossip(t, revotes)
	require.NotEmpty(t, certs, "q votes of epoch 1: a certificate ends the session")
	require.NoError(t, certs[0].Verify(next, q))
}

// docs/protocol.md change 63 (issue 54, item 1): a kept member that knew a
// session only from forwarded statements, or from f+1 votes, held its lease
// with the default TTL; the copy's end restarted it with that TTL, so it
// voted in the new epoch a default TTL after the copy's end — before the
// client's guarantee of the epoch before, counted with the client's own
// TTL, ended. With a faulty member's vote at once, that was f+1, the new
// members' copied leases gave way (change 47), and a quorum ended a live
// holder's session. The copy shows the client's signed open: the lease
// takes its TTL, so its vote comes a whole client TTL after the copy's
// end, whether the lease was live or already voted on in the epoch before.
func TestCopiedOpenGivesAKeptLeaseItsClientsTTL(t *testing.T) {
	const n, q = 4, 3
	def, clientTTL := time.Second, 3*time.Second
	for _, voted := range []bool{false, true} {
		f := newFixture(t, n, q, def)
		ck, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
		require.NoError(t, err)
		c := wire.ClientID(ck.Public.ID)
		open, err := wire.SignOpen(ck, f.keys.Cluster, 1, uint32(clientTTL/time.Millisecond))
		require.NoError(t, err)
		d := f.dets[2]
		t0 := time.Unix(0, 0)
		require.NoError(t, d.Observe(c, 1, t0)) // a forward: the default TTL
		end := t0.Add(def / 2)
		if voted {
			end = t0.Add(2 * def)
			v := d.Tick(end)
			require.Len(t, v, 1, "the lease of the forward ran out: a vote of epoch 0")
			_, _, err := d.AddVote(v[0])
			require.NoError(t, err)
		}
		require.True(t, d.RestoreCopied(c, 1, clientTTL, false, &open), "the copy's signed open gives the session its client's TTL")
		got, ok := d.TTLOf(c, 1)
		require.True(t, ok)
		require.Equal(t, clientTTL, got)
		require.Same(t, &open, d.OpenOf(c, 1), "kept to hand on in later copies")
		require.False(t, d.RestoreCopied(c, 1, time.Hour, false, &open), "a TTL known stands")

		next := f.keys
		next.Epoch = 1
		d.SetEpoch(next, q)
		d.RestartClocks(end)
		require.Empty(t, d.Tick(end.Add(def)), "voted=%t: no vote a default TTL after the copy's end", voted)
		require.Empty(t, d.Tick(end.Add(clientTTL-time.Millisecond)), "voted=%t: no vote before the client's TTL ran out", voted)
		v := d.Tick(end.Add(clientTTL))
		require.Len(t, v, 1, "voted=%t: a vote of epoch 1 a whole client TTL after the copy's end", voted)
		body, err := v[0].Verify(next)
		require.NoError(t, err)
		require.EqualValues(t, 1, body.Epoch)
	}

	// Without a signed open, a lease this server started itself keeps its
	// TTL: the copy's unsigned numbers change nothing (change 47).
	f := newFixture(t, n, q, def)
	c := clientID(t)
	t0 := time.Unix(0, 0)
	require.NoError(t, f.dets[1].Observe(c, 1, t0))
	require.False(t, f.dets[1].RestoreCopied(c, 1, clientTTL, false, nil))
	_, ok := f.dets[1].TTLOf(c, 1)
	require.False(t, ok)
}

// docs/protocol.md changes 43 and 47: a certificate this server wrote in an
// earlier epoch and reads back (RestoreCertificate) verifies against that
// epoch's own members and quorum (KeysOf), never the served epoch's. Epoch
// 0 had 7 members (q = 5), epoch 1 has 4 of them (q = 3): four votes of
// epoch 0 make no certificate of it. Else a restart would end a session on
// fewer votes than its epoch's quorum — f+1 faulty members and two correct
// ones that voted on a cut-off client, not a quorum whose correct members
// outnumber every guarantee the client's lease rests on.
func TestACertificateOfAnEarlierEpochNeedsItsQuorum(t *testing.T) {
	const n0, q0, q1 = 7, 5, 3
	ttl := time.Second
	f := newFixture(t, n0, q0, ttl)
	one := f.keys
	one.Epoch, one.Servers = 1, f.keys.Servers[:4]
	d, err := NewMuteness(MutenessConfig{
		Self: 0, Quorum: q1, Keys: one, Signer: f.signers[0],
		DefaultTTL: ttl, MinTTL: time.Millisecond, MaxTTL: time.Hour,
		DoorwayDeadline: 5 * ttl, MaxSessions: 4, MaxPendingVotes: 8, MaxDeferred: 4,
		KeysOf: func(e uint64) (wire.Keyring, int, bool) {
			if e == 0 {
				return f.keys, q0, true
			}
			return wire.Keyring{}, 0, false
		},
	})
	require.NoError(t, err)
	c := clientID(t)
	cert := &wire.ResetCertificate{Client: c, Session: 1}
	for s := range q0 {
		v, err := wire.SignSuspect(f.signers[s], f.keys.Cluster, &wire.SuspectBody{Client: c, Session: 1, Server: wire.ServerID(s), Reason: wire.SuspectMute})
		require.NoError(t, err)
		cert.Votes = append(cert.Votes, v)
	}
	for votes := q1; votes < q0; votes++ {
		short := *cert
		short.Votes = cert.Votes[:votes]
		require.Error(t, d.RestoreCertificate(&short), "%d votes of epoch 0, whose quorum is %d", votes, q0)
		require.Zero(t, d.ResetUpTo(c))
	}
	require.NoError(t, d.RestoreCertificate(cert), "q0 votes of epoch 0")
	require.Equal(t, uint64(1), d.ResetUpTo(c))
}

// docs/protocol.md changes 57 and 63: a vote of the epoch before is cast
// again a whole client TTL after the copy's end even where its lease is
// gone — dropped for newer sessions of the client (the oldest suspected
// lease goes first) while the TTL its client told stays known. Else it
// would be cast a default TTL after the copy's end, before the client's
// guarantee of the epoch before (counted with its own, longer TTL) ended,
// and with a faulty member's vote at once that is f+1: the new members'
// copied leases give way, and a quorum ends a live holder's session
// (change 57's seed 4008282, change 63's default_ttl).
func TestARevoteWithoutALeaseWaitsItsClientsTTL(t *testing.T) {
	const n, q = 4, 3
	def, clientTTL := time.Second, 3*time.Second
	f := newFixture(t, n, q, def)
	d := f.dets[0]
	c := clientID(t)
	t0 := time.Unix(0, 0)
	mustOpen(t, d, c, 1, clientTTL, t0)
	v := d.Tick(t0.Add(clientTTL))
	require.Len(t, v, 1, "the client's lease ran out: a vote of epoch 0")
	_, _, err := d.AddVote(v[0])
	require.NoError(t, err)
	at := t0.Add(clientTTL + def)
	for sess := uint64(2); sess <= 5; sess++ { // forwards of newer sessions: the suspected lease makes room
		require.NoError(t, d.Observe(c, sess, at))
	}
	require.True(t, d.Voted(c, 1))
	got, ok := d.TTLOf(c, 1)
	require.True(t, ok, "the TTL its client told stays known")
	require.Equal(t, clientTTL, got)

	next := f.keys
	next.Epoch = 1
	end := at.Add(def)
	d.SetEpoch(next, q)
	d.RestartClocks(end)
	revotes := func(now time.Time) (out []wire.SuspectBody) {
		for _, v := range d.Tick(now) {
			body, err := v.Verify(next)
			require.NoError(t, err)
			if body.Session == 1 {
				out = append(out, *body)
			}
		}
		return out
	}
	require.Empty(t, revotes(end.Add(def)), "no vote a default TTL after the copy's end")
	require.Empty(t, revotes(end.Add(clientTTL-time.Millisecond)), "nor before the client's TTL ran out")
	require.Len(t, revotes(end.Add(clientTTL)), 1, "a vote of epoch 1 a whole client TTL after the copy's end")
}

// Issue 54, item 4: a copy's session that finds no room keeps nothing here,
// not even its TTL or its open. A faulty member's copy can name a client's
// sessions with signed opens of keys it made (sybils never admitted on a
// closed cluster); each copier took every TTL and open past its bound on
// leases, on disk, and never collected them.
func TestACopiedSessionWithoutRoomLeavesNoTTL(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second) // MaxSessions 4
	ck, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	c := wire.ClientID(ck.Public.ID)
	d := f.dets[0]
	for sess := uint64(1); sess <= 6; sess++ {
		open, err := wire.SignOpen(ck, f.keys.Cluster, sess, 2000)
		require.NoError(t, err)
		took := d.RestoreCopied(c, sess, 2*time.Second, false, &open)
		_, hasTTL := d.TTLOf(c, sess)
		require.Equal(t, took, hasTTL, "session %d", sess)
		require.Equal(t, took, d.OpenOf(c, sess) != nil, "session %d", sess)
		if sess > 4 {
			require.False(t, took, "session %d: MaxSessions copied leases at most", sess)
		}
	}
	sessions, _, _ := d.Footprint(c)
	require.Equal(t, 4, sessions)
	require.Len(t, d.SessionTTLs(c), 4)
}
