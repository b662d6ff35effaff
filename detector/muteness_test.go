package detector

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

type fixture struct {
	keys    wire.Keyring
	signers []*crypto.PrivateKey
	dets    []*Muteness
}

func newFixture(t *testing.T, n, q int, ttl time.Duration) *fixture {
	return newFixtureIn(t, 0, n, q, ttl)
}

// newFixtureIn is newFixture with the detectors in epoch e (change 43).
func newFixtureIn(t *testing.T, e uint64, n, q int, ttl time.Duration) *fixture {
	f := &fixture{}
	for range n {
		k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
		require.NoError(t, err)
		f.keys.Servers = append(f.keys.Servers, k.Public)
		f.signers = append(f.signers, k)
	}
	f.keys = wire.NewKeyring((n-1)/3, f.keys.Servers)
	f.keys.Epoch = e
	for i := range n {
		m, err := NewMuteness(MutenessConfig{
			Self: wire.ServerID(i), Quorum: q, Keys: f.keys, Signer: f.signers[i],
			DefaultTTL: ttl, MinTTL: time.Millisecond, MaxTTL: time.Hour,
			DoorwayDeadline: 5 * ttl, MaxSessions: 4, MaxPendingVotes: 8, MaxDeferred: 4,
		})
		require.NoError(t, err)
		f.dets = append(f.dets, m)
	}
	return f
}

// gossip hands every vote to every detector and returns the certificates formed.
func (f *fixture) gossip(t *testing.T, votes []wire.SignedSuspect) []*wire.ResetCertificate {
	var certs []*wire.ResetCertificate
	for _, v := range votes {
		for _, d := range f.dets {
			_, cert, err := d.AddVote(v)
			require.NoError(t, err)
			if cert != nil {
				certs = append(certs, cert)
			}
		}
	}
	return certs
}

func clientID(t *testing.T) wire.ClientID {
	k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	return wire.ClientID(k.Public.ID)
}

// docs/protocol.md §5: while a client keeps leases at q servers, no certificate
// forms, even with f Byzantine servers voting against it every moment.
//
// The q servers the client reaches include the f Byzantine ones (a faulty
// server may take heartbeats and vote all the same), so the n−q correct
// servers it does not reach vote too, rightly, once its lease there runs
// out: f + n−q = 2f votes for n = 3f+1, at least f+1 and fewer than q. A
// rule of f+1 votes would reset the client; q votes do not.
func TestNoResetWhileQLeasesLive(t *testing.T) {
	for _, tc := range []struct{ n, q int }{{4, 3}, {7, 5}} {
		certs, votes := resetsWhileQLeasesLive(t, tc.n, tc.q)
		f := (tc.n - 1) / 3
		require.GreaterOrEqual(t, votes, f+1, "n=%d: the Byzantine and the unreached correct servers' votes reach f+1", tc.n)
		require.Less(t, votes, tc.q, "n=%d: and fewer than q", tc.n)
		require.Empty(t, certs, "n=%d: %d votes (f+1 = %d, q = %d) made a certificate", tc.n, votes, f+1, tc.q)
	}
}

// resetsWhileQLeasesLive runs TestNoResetWhileQLeasesLive's scenario on n
// servers with quorum q for 25 TTLs and returns the certificates formed
// and the number of servers that voted against the client.
func resetsWhileQLeasesLive(t *testing.T, n, q int) ([]*wire.ResetCertificate, int) {
	t.Helper()
	byz := (n - 1) / 3
	ttl := time.Second
	f := newFixture(t, n, q, ttl)
	c := clientID(t)
	now := time.Unix(0, 0)
	// Servers 0..q-byz-1 are correct and reached; q-byz..n-byz-1 correct
	// and not reached; n-byz..n-1 Byzantine (and reached).
	reached, correct := q-byz, n-byz
	for s := range correct {
		mustOpen(t, f.dets[s], c, 1, ttl, now)
	}
	voted := make(map[wire.ServerID]bool)
	var certs []*wire.ResetCertificate
	for range 100 {
		now = now.Add(ttl / 4)
		// The client heartbeats the servers it reaches every TTL/4.
		for s := range reached {
			require.NoError(t, f.dets[s].Heartbeat(c, 1, now))
		}
		var votes []wire.SignedSuspect
		for s := range correct {
			votes = append(votes, f.dets[s].Tick(now)...)
		}
		// The Byzantine servers sign a vote against the client at every step.
		for s := correct; s < n; s++ {
			bad, err := wire.SignSuspect(f.signers[s], f.keys.Cluster, &wire.SuspectBody{Client: c, Session: 1, Server: wire.ServerID(s), Reason: wire.SuspectMute})
			require.NoError(t, err)
			votes = append(votes, bad)
		}
		for _, v := range votes {
			body, err := v.Verify(f.keys)
			require.NoError(t, err)
			require.Equal(t, c, body.Client)
			require.False(t, int(body.Server) < reached, "reached server %d voted", body.Server)
			voted[body.Server] = true
		}
		certs = append(certs, f.gossip(t, votes)...)
	}
	if len(certs) == 0 {
		for s := range n {
			require.Zero(t, f.dets[s].ResetUpTo(c))
		}
	}
	return certs, len(voted)
}

// A client that goes silent is reset at every correct server within 2×TTL of
// its last heartbeat.
func TestSilentClientResetWithinTwoTTL(t *testing.T) {
	const n, q = 4, 3
	ttl := time.Second
	f := newFixture(t, n, q, ttl)
	c := clientID(t)
	t0 := time.Unix(0, 0)
	for s := range n {
		mustOpen(t, f.dets[s], c, 1, ttl, t0)
	}
	last := t0.Add(300 * time.Millisecond)
	for s := range n {
		require.NoError(t, f.dets[s].Heartbeat(c, 1, last))
	}
	var resetAt time.Time
	for now := last; now.Before(last.Add(3 * ttl)); now = now.Add(10 * time.Millisecond) {
		var votes []wire.SignedSuspect
		for s := range n {
			votes = append(votes, f.dets[s].Tick(now)...)
		}
		for _, cert := range f.gossip(t, votes) {
			for _, d := range f.dets {
				_, err := d.ApplyCertificate(cert)
				require.NoError(t, err)
			}
		}
		done := true
		for _, d := range f.dets {
			done = done && d.ResetUpTo(c) == 1
		}
		if done {
			resetAt = now
			break
		}
	}
	require.False(t, resetAt.IsZero(), "never reset")
	require.LessOrEqual(t, resetAt.Sub(last), 2*ttl)
	// The session stays refused.
	require.ErrorIs(t, f.dets[0].Heartbeat(c, 1, resetAt), ErrSessionReset)
	require.ErrorIs(t, f.dets[0].Observe(c, 1, resetAt), ErrSessionReset, "no lease for a late statement of a reset session")
	mustOpen(t, f.dets[0], c, 2, ttl, resetAt)
}

// A client that stays in its Doorway past the deadline is voted out even
// while it heartbeats (§5).
func TestDoorwayDeadline(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second)
	c := clientID(t)
	t0 := time.Unix(0, 0)
	d := f.dets[0]
	mustOpen(t, d, c, 1, time.Second, t0)
	d.DoorwayStarted(c, "L", 1, t0)
	for now := t0; now.Before(t0.Add(4900 * time.Millisecond)); now = now.Add(100 * time.Millisecond) {
		require.NoError(t, d.Heartbeat(c, 1, now))
		require.Empty(t, d.Tick(now))
	}
	// At the deadline the session is refused at once (heartbeats no longer
	// renew it) but the vote waits until the lease runs out, as for a mute
	// client, so it can never join a certificate while the client's lease
	// guarantee still counts this server: the lease the last heartbeat
	// (4.8 s) renewed, to 5.8 s, and not later.
	require.Empty(t, d.Tick(t0.Add(5*time.Second)))
	require.Error(t, d.Heartbeat(c, 1, t0.Add(5500*time.Millisecond)))
	require.False(t, d.LeaseOK(c, 1, t0.Add(5500*time.Millisecond)))
	require.Empty(t, d.Tick(t0.Add(5700*time.Millisecond)))
	votes := d.Tick(t0.Add(5800 * time.Millisecond))
	require.Len(t, votes, 1)
	body, err := votes[0].Verify(f.keys)
	require.NoError(t, err)
	require.Equal(t, wire.SuspectDoorway, body.Reason)
	// Leaving the Doorway in time means no vote.
	c2 := clientID(t)
	mustOpen(t, d, c2, 1, time.Second, t0)
	d.DoorwayStarted(c2, "L", 1, t0)
	d.DoorwayEnded(c2, "L")
	require.NoError(t, d.Heartbeat(c2, 1, t0.Add(6*time.Second)))
	require.Empty(t, d.Tick(t0.Add(6*time.Second)))
}

// Certificates need q distinct, valid votes on one (client, session).
func TestCertificateRules(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second)
	c := clientID(t)
	vote := func(s int, sess uint64) wire.SignedSuspect {
		v, err := wire.SignSuspect(f.signers[s], f.keys.Cluster, &wire.SuspectBody{Client: c, Session: sess, Server: wire.ServerID(s), Reason: wire.SuspectMute})
		require.NoError(t, err)
		return v
	}
	d := f.dets[0]
	added, cert, err := d.AddVote(vote(1, 5))
	require.NoError(t, err)
	require.True(t, added)
	require.Nil(t, cert)
	added, _, _ = d.AddVote(vote(1, 5))
	require.False(t, added, "one server counts once")
	_, cert, _ = d.AddVote(vote(2, 6))
	require.Nil(t, cert, "votes on other sessions do not add up")
	_, cert, _ = d.AddVote(vote(3, 5))
	require.Nil(t, cert)
	_, cert, _ = d.AddVote(vote(2, 5))
	require.NotNil(t, cert)
	require.NoError(t, cert.Verify(f.keys, 3))
	// A vote signed by the wrong server is refused.
	forged := vote(1, 7)
	forged.Server = 2
	_, _, err = d.AddVote(forged)
	require.Error(t, err)
	// A certificate with f+1 votes is not enough.
	short := *cert
	short.Votes = short.Votes[:2]
	_, err = f.dets[1].ApplyCertificate(&short)
	require.Error(t, err)
	require.Error(t, f.dets[1].RestoreCertificate(&short), "nor read back from disk")
	fresh, err := f.dets[1].ApplyCertificate(cert)
	require.NoError(t, err)
	require.True(t, fresh)
	require.Equal(t, uint64(5), f.dets[1].ResetUpTo(c))
}

// After a restart a server keeps refusing the sessions it voted against.
func TestRestoredVoteKeepsRefusing(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second)
	c := clientID(t)
	t0 := time.Unix(0, 0)
	mustOpen(t, f.dets[0], c, 3, time.Second, t0)
	votes := f.dets[0].Tick(t0.Add(2 * time.Second))
	require.Len(t, votes, 1)
	again := newFixture(t, 4, 3, time.Second)
	again.keys, again.signers = f.keys, f.signers
	m, err := NewMuteness(f.dets[0].cfg)
	require.NoError(t, err)
	require.NoError(t, m.RestoreVote(votes[0]))
	require.ErrorIs(t, m.Heartbeat(c, 3, t0.Add(3*time.Second)), ErrSessionSuspected)
}

// mustOpen opens a session and fails the test on an error.
func mustOpen(t *testing.T, d *Muteness, c wire.ClientID, sess uint64, ttl time.Duration, now time.Time) {
	t.Helper()
	_, err := d.Open(c, sess, ttl, now)
	require.NoError(t, err)
}

// docs/protocol.md change 18: sessions of one identity end in order. A
// newer session does not end an older one early (a detached holding lives
// out its lease), but the older one is never renewed once a newer one is
// known, so it does end; and no vote on the newer one is cast while the
// older one's lease lives.
func TestSessionsEndInOrder(t *testing.T) {
	const ttl = time.Second
	f := newFixture(t, 4, 3, ttl)
	d := f.dets[0]
	c := clientID(t)
	t0 := time.Unix(1000, 0)
	_, err := d.Open(c, 5, time.Minute, t0) // the detached holding's session: a long lease
	require.NoError(t, err)
	_, err = d.Open(c, 6, ttl, t0.Add(time.Second)) // the same identity, another command
	require.NoError(t, err)
	require.ErrorIs(t, d.Heartbeat(c, 5, t0.Add(2*time.Second)), ErrSessionSuperseded, "(a) the older session is no longer renewed")
	_, err = d.Open(c, 5, time.Minute, t0.Add(2*time.Second))
	require.ErrorIs(t, err, ErrSessionSuperseded)
	require.NoError(t, d.Heartbeat(c, 6, t0.Add(2*time.Second)), "the newest one is")

	d.Close(c, 6, t0.Add(3*time.Second)) // the command ends
	require.Empty(t, d.Tick(t0.Add(3*time.Second)), "(b) no vote on 6 while 5's lease lives")
	require.False(t, d.LeaseOK(c, 6, t0.Add(3*time.Second)), "6 is refused at once")
	require.ErrorIs(t, d.Heartbeat(c, 6, t0.Add(3*time.Second)), ErrSessionSuspected)
	require.True(t, d.LeaseOK(c, 5, t0.Add(30*time.Second)), "5 lives out its lease")
	require.Empty(t, d.Tick(t0.Add(60*time.Second-time.Millisecond)))

	votes := d.Tick(t0.Add(60 * time.Second)) // 5's lease runs out
	var sessions []uint64
	for _, v := range votes {
		body, err := v.Verify(f.keys)
		require.NoError(t, err)
		sessions = append(sessions, body.Session)
	}
	require.Equal(t, []uint64{5, 6}, sessions, "then both are voted on")
	require.ErrorIs(t, d.Heartbeat(c, 6, t0.Add(61*time.Second)), ErrSessionSuspected, "a session voted on is never acked again")
}

// change 18: the sessions a server defers for one client are bounded; beyond
// the bound it refuses newer sessions (a clear refusal), never grows.
func TestDeferredSessionsBounded(t *testing.T) {
	const ttl = time.Second
	f := newFixture(t, 4, 3, ttl)
	d := f.dets[0]
	c := clientID(t)
	now := time.Unix(1000, 0)
	_, err := d.Open(c, 1, time.Hour, now)
	require.NoError(t, err)
	for sess := uint64(2); ; sess++ {
		now = now.Add(time.Millisecond)
		_, err := d.Open(c, sess, ttl, now)
		if err != nil {
			require.ErrorIs(t, err, ErrTooManyDeferred)
			break
		}
		d.Close(c, sess, now)
		require.Empty(t, d.Tick(now))
		require.Less(t, sess, uint64(100))
	}
	_, deferred, _ := d.Footprint(c)
	require.Equal(t, 4, deferred)
}

// A server that voted on a newer session still votes on an older one that
// other servers vote on (it starts a lease when f+1 votes arrive, Observe,
// and votes when it runs out): a certificate on the older session must not
// wait for this server's vote on the newer one, which may never gather q.
// But it never renews, so never acks "ok", a session at or below one it
// voted on.
func TestVotedOnNewerStillVotesOnOlder(t *testing.T) {
	const ttl = time.Second
	f := newFixture(t, 4, 3, ttl)
	d := f.dets[0]
	c := clientID(t)
	t0 := time.Unix(1000, 0)
	_, err := d.Open(c, 7, ttl, t0)
	require.NoError(t, err)
	d.Close(c, 7, t0)
	require.Len(t, d.Tick(t0), 1, "the vote on 7")

	require.NoError(t, d.Observe(c, 6, t0), "f+1 votes on 6 arrived: a lease to vote with")
	require.ErrorIs(t, d.Heartbeat(c, 6, t0), ErrSessionSuspected, "never renewed")
	_, err = d.Open(c, 6, ttl, t0)
	require.ErrorIs(t, err, ErrSessionSuspected)
	votes := d.Tick(t0.Add(ttl))
	require.Len(t, votes, 1)
	body, err := votes[0].Verify(f.keys)
	require.NoError(t, err)
	require.Equal(t, uint64(6), body.Session)
}

// docs/protocol.md change 43: sessions given back by a copy (or a disk) do
// not count against the client's session limit until it speaks in them —
// a copy hands on sessions whose clients closed them while the epoch was
// sealed, and a client that runs a short process a second must not be
// refused for a TTL after every change — while at most MaxSessions of
// each kind are kept, so memory stays bounded.
func TestRestoredSessionsDoNotCountAgainstTheLimit(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second)
	d := f.dets[0]
	c := clientID(t)
	now := time.Unix(1_000, 0)
	for sess := uint64(1); sess <= 6; sess++ {
		d.RestoreTTL(c, sess, time.Second)
	}
	require.Len(t, d.clients[c].leases, 4, "at most MaxSessions restored")
	require.NoError(t, d.Heartbeat(c, 4, now), "a restored session its client speaks in is renewed")
	for sess := uint64(10); sess < 13; sess++ {
		require.NoError(t, d.Heartbeat(c, sess, now), "session %d: the restored ones not spoken in do not count", sess)
	}
	require.ErrorIs(t, d.Heartbeat(c, 13, now), ErrTooManySessions, "the limit holds for sessions heard of, session 4 among them")
	require.Len(t, d.clients[c].leases, 7)

	// Three restored left, four of the client's own: one restored more
	// fills both kinds; the client speaks in it, so it is the client's
	// (five), and no restored one is kept any more: the whole stays within
	// 2×MaxSessions (campaign seed 6012409: a new member held nine).
	d.RestoreTTL(c, 20, time.Second)
	require.Len(t, d.clients[c].leases, 8)
	require.NoError(t, d.Heartbeat(c, 20, now), "the client speaks in it: five of its own, three restored")
	d.RestoreTTL(c, 21, time.Second)
	d.HeardOf(c, 22, now)
	require.Len(t, d.clients[c].leases, 8, "at most 2×MaxSessions leases in all")
}

// docs/protocol.md change 43: the end of a copy starts every lease afresh
// (the change never shortens a lease) but a session its client closed: it
// is voted on at once, as it would have been without the change.
func TestCopyEndKeepsClosedSessionsClosed(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second)
	d := f.dets[0]
	c := clientID(t)
	now := time.Unix(1_000, 0)
	require.NoError(t, d.Heartbeat(c, 1, now))
	require.NoError(t, d.Heartbeat(c, 2, now))
	d.Close(c, 1, now)
	d.RestartClocks(now)
	votes := d.Tick(now.Add(time.Millisecond))
	require.Len(t, votes, 1, "the closed session is voted on at once")
	require.Empty(t, d.Tick(now.Add(900*time.Millisecond)), "the live one got a whole TTL from the copy's end")
	require.NoError(t, d.Heartbeat(c, 2, now.Add(900*time.Millisecond)))
}

// docs/protocol.md change 43: a copy says which sessions their clients
// closed, and a session the copier restores as closed starts ended: it is
// voted on in order and keeps no newer session of its client waiting,
// where a restored live one keeps every newer session that ends deferred
// for a whole TTL — a loop of short processes of one identity, each
// closing its session, met max_deferred_sessions at the new members.
func TestRestoredClosedSessionsWaitForNothing(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second)
	c := clientID(t)
	now := time.Unix(1_000, 0)

	src := f.dets[1]
	for sess := uint64(1); sess <= 2; sess++ {
		_, err := src.Open(c, sess, time.Second, now)
		require.NoError(t, err)
	}
	src.Close(c, 1, now)
	closed := map[uint64]bool{}
	for _, cc := range src.CopyClients() {
		require.Equal(t, c, cc.Client)
		for _, s := range cc.Sessions {
			closed[s.Session] = s.Closed
		}
	}
	require.Equal(t, map[uint64]bool{1: true, 2: false}, closed, "the copy marks the closed session only")

	for _, restoreClosed := range []bool{false, true} {
		d := newFixture(t, 4, 3, time.Second).dets[0]
		d.RestoreCopied(c, 1, time.Second, restoreClosed, nil)
		d.Tick(now)
		// Newer sessions open and close here, one after another.
		for sess := uint64(2); sess <= 4; sess++ {
			_, err := d.Open(c, sess, time.Second, now)
			require.NoError(t, err)
			d.Close(c, sess, now)
			d.Tick(now.Add(time.Millisecond))
		}
		if restoreClosed {
			require.Empty(t, d.clients[c].deferred, "nothing waits for a session its client closed")
			require.False(t, d.LeaseOK(c, 1, now))
		} else {
			require.Len(t, d.clients[c].deferred, 3, "a restored live session keeps the newer ones waiting")
		}
	}
}

// docs/protocol.md change 46: a lease a server starts on f+1 servers' votes,
// for a session it held no lease on, does not count against MaxSessions
// until the client speaks in it here, is bounded like restored ones, and is
// voted on when it runs out.
func TestSessionsHeardOfDoNotCountAgainstTheLimit(t *testing.T) {
	f := newFixture(t, 4, 3, time.Second)
	d := f.dets[0]
	c := clientID(t)
	now := time.Unix(1_000, 0)
	for sess := uint64(1); sess <= 6; sess++ {
		d.HeardOf(c, sess, now)
	}
	require.Len(t, d.clients[c].leases, 4, "at most MaxSessions heard of")
	for sess := uint64(10); sess < 14; sess++ {
		mustOpen(t, d, c, sess, time.Second, now)
	}
	_, err := d.Open(c, 14, time.Second, now)
	require.ErrorIs(t, err, ErrTooManySessions, "the limit holds for the sessions the client opened")
	d.HeardOf(c, 1, now.Add(time.Hour)) // known: nothing changes
	require.Equal(t, now.Add(time.Second), d.clients[c].leases[0].until)

	// Run out: the server votes on sessions 1 to 4 as it would have.
	votes := d.Tick(now.Add(1100 * time.Millisecond))
	var voted []uint64
	for _, v := range votes {
		var body wire.SuspectBody
		require.NoError(t, crypto.Unmarshal(v.Signed.Body, &body))
		voted = append(voted, body.Session)
	}
	require.Subset(t, voted, []uint64{1, 2, 3, 4})
}

// docs/protocol.md change 47: a lease a copy gave, whose client has not
// opened the session here since, ends when f+1 votes of the epoch served
// are on its session — its TTL is the longest any reporter named, and a
// faulty one's must not keep a gone client's session from its certificate.
// A heartbeat does not renew it (nor is it acked: the vote must count
// against no guarantee); a SessionOpen does, with the client's own TTL,
// and the lease is then an ordinary one. A lease given back by this
// server's own disk does not give way (it may have acked the session before
// it went down).
func TestCopiedLeaseYieldsToFPlusOneVotes(t *testing.T) {
	now := time.Unix(1_000, 0)
	for _, tc := range []struct {
		name    string
		restore func(d *Muteness, c wire.ClientID)
		yields  bool
	}{
		{"copied", func(d *Muteness, c wire.ClientID) { d.RestoreCopied(c, 1, time.Hour, false, nil) }, true},
		{"from its disk", func(d *Muteness, c wire.ClientID) { d.RestoreTTL(c, 1, time.Hour) }, false},
		{"copied, then a heartbeat", func(d *Muteness, c wire.ClientID) {
			d.RestoreCopied(c, 1, time.Hour, false, nil)
			require.ErrorIs(t, d.Heartbeat(c, 1, now), ErrNotOpenedHere, "not acked")
		}, true},
		{"copied, then opened", func(d *Muteness, c wire.ClientID) {
			d.RestoreCopied(c, 1, time.Hour, false, nil)
			_, err := d.Open(c, 1, 10*time.Second, now)
			require.NoError(t, err)
			require.NoError(t, d.Heartbeat(c, 1, now), "acked once opened")
			require.Equal(t, 10*time.Second, d.clients[c].leases[0].ttl, "with the client's TTL")
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newFixture(t, 4, 3, time.Second).dets[0]
			c := clientID(t)
			tc.restore(d, c)
			require.Empty(t, d.Tick(now))
			d.YieldCopied(c, 1, now.Add(time.Second))
			votes := d.Tick(now.Add(2 * time.Second))
			if !tc.yields {
				require.Empty(t, votes, "the lease runs its TTL")
				return
			}
			require.Len(t, votes, 1, "voted on at the next tick")
			body, err := votes[0].Verify(d.cfg.Keys)
			require.NoError(t, err)
			require.Equal(t, uint64(1), body.Session)
		})
	}
}

// docs/protocol.md change 47: a copy names TTLs that a faulty member may
// have raised; a session whose TTL its client told this server itself
// keeps it, and so does a lease this server started on a forward.
func TestCopiedTTLNeverOverridesTheClients(t *testing.T) {
	d := newFixture(t, 4, 3, time.Second).dets[0]
	c := clientID(t)
	now := time.Unix(1_000, 0)
	_, err := d.Open(c, 1, 2*time.Second, now)
	require.NoError(t, err)
	require.False(t, d.RestoreCopied(c, 1, time.Hour, false, nil), "the client's own TTL stands")
	require.Equal(t, 2*time.Second, d.clients[c].ttls[1])
	require.Equal(t, 2*time.Second, d.clients[c].leases[0].ttl)
	require.NoError(t, d.Observe(c, 3, now)) // a forward's: a lease of the default TTL, no TTL told
	require.False(t, d.RestoreCopied(c, 3, time.Hour, false, nil), "a lease of its own stands")
	require.Equal(t, time.Second, d.clients[c].leases[1].ttl)
	require.True(t, d.RestoreCopied(c, 2, time.Hour, false, nil), "a session this server never heard of takes the copy's")
}
