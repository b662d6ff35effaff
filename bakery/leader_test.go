package bakery

import (
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// leaderFixture signs statements and proclamations of a few candidates of
// one cluster (n = 4, f = 1) and builds the servers' Status replies.
type leaderFixture struct {
	t       testing.TB
	cluster wire.ClusterID
	keys    map[string]*crypto.PrivateKey
	replies [4]*wire.StatusReply
}

const electionLock = "elect/x"

func newLeaderFixture(t testing.TB, names ...string) *leaderFixture {
	lf := &leaderFixture{t: t, cluster: wire.ClusterID{7}, keys: map[string]*crypto.PrivateKey{}}
	for _, n := range names {
		lf.keys[n] = newKeyTB(t)
	}
	for i := range lf.replies {
		lf.replies[i] = &wire.StatusReply{Server: wire.ServerID(i), Lock: electionLock}
	}
	return lf
}

func (lf *leaderFixture) id(name string) wire.ClientID { return wire.ClientID(lf.keys[name].Public.ID) }

func (lf *leaderFixture) stmt(name string, att uint64, ph wire.Phase, n uint64) wire.SignedStatement {
	st := &wire.Statement{Lock: electionLock, Client: lf.id(name), Session: 1, Attempt: att, Phase: ph, N: n}
	if ph == wire.PhaseTicket {
		st.JHash = &wire.Digest{1}
	}
	ss, err := wire.SignStatement(lf.keys[name], lf.cluster, st)
	require.NoError(lf.t, err)
	return ss
}

func (lf *leaderFixture) proc(name string, att, n, rev uint64, v string) wire.SignedProclamation {
	p, err := wire.SignProclamation(lf.keys[name], lf.cluster, &wire.ProclamationBody{Lock: electionLock, Client: lf.id(name),
		Session: 1, Attempt: att, N: n, Rev: rev, Value: []byte(v)})
	require.NoError(lf.t, err)
	return p
}

// at has servers report ss.
func (lf *leaderFixture) at(ss wire.SignedStatement, servers ...int) {
	for _, s := range servers {
		lf.replies[s].Members = append(lf.replies[s].Members, ss)
	}
}

func (lf *leaderFixture) said(p wire.SignedProclamation, servers ...int) {
	for _, s := range servers {
		lf.replies[s].Proclamations = append(lf.replies[s].Proclamations, p)
	}
}

// decide decides on the replies of the given servers.
func (lf *leaderFixture) decide(servers ...int) (*Leader, *NoLeader) {
	var rs []*wire.StatusReply
	for _, s := range servers {
		rs = append(rs, lf.replies[s])
	}
	return DecideLeader(lf.cluster, 1, electionLock, rs)
}

func TestDecideLeaderOnFPlusOne(t *testing.T) {
	lf := newLeaderFixture(t, "a")
	_, no := lf.decide(0, 1, 2, 3)
	require.Contains(t, no.Reason, "nobody holds")

	lf.at(lf.stmt("a", 1, wire.PhaseHeld, 5), 0, 1, 2)
	_, no = lf.decide(0, 1, 2, 3)
	require.Contains(t, no.Reason, "has not proclaimed")
	require.Equal(t, lf.id("a"), no.Next)

	lf.said(lf.proc("a", 1, 5, 1, "one"), 0)
	_, no = lf.decide(0, 1, 2, 3)
	require.NotNil(t, no, "one server's proclamation does not count")
	lf.said(lf.proc("a", 1, 5, 1, "one"), 1)
	l, no := lf.decide(0, 1, 2, 3)
	require.Nil(t, no)
	require.Equal(t, Leader{Client: lf.id("a"), Term: Token{N: 5, Client: lf.id("a")}, Session: 1, Attempt: 1, Rev: 1, Value: []byte("one")}, *l)

	// Rev 2 counts once f+1 servers hold it; until then rev 1 is the value.
	lf.said(lf.proc("a", 1, 5, 2, "two"), 2)
	l, _ = lf.decide(0, 1, 2, 3)
	require.Equal(t, "one", string(l.Value))
	lf.said(lf.proc("a", 1, 5, 2, "two"), 3)
	lf.at(lf.stmt("a", 1, wire.PhaseHeld, 5), 3)
	l, _ = lf.decide(0, 1, 2, 3)
	require.Equal(t, "two", string(l.Value))
	require.Equal(t, uint64(2), l.Rev)
}

// One faulty server (f = 1) cannot name a false leader, value or term.
func TestDecideLeaderOneFaultyServer(t *testing.T) {
	lf := newLeaderFixture(t, "a", "m")
	// a leads at servers 0 and 1; m is behind it (ticket 6) at 0, 1 and 2.
	lf.at(lf.stmt("a", 1, wire.PhaseHeld, 5), 0, 1)
	lf.said(lf.proc("a", 1, 5, 1, "a's"), 0, 1)
	lf.at(lf.stmt("m", 1, wire.PhaseTicket, 6), 0, 1, 2)
	// Faulty server 3 shows m (a malicious candidate) holding, with a value,
	// and an old attempt's proclamation of a.
	lf.at(lf.stmt("m", 1, wire.PhaseHeld, 6), 3)
	lf.said(lf.proc("m", 1, 6, 9, "m's"), 3)
	lf.said(lf.proc("a", 1, 5, 7, "faked rev"), 3)
	for _, qs := range [][]int{{0, 1, 2, 3}, {0, 1, 3}} {
		l, no := lf.decide(qs...)
		require.Nil(t, no)
		require.Equal(t, lf.id("a"), l.Client)
		require.Equal(t, "a's", string(l.Value))
	}
	// A Held below a's, of a candidate z colluding with server 3, shown by
	// server 3 alone, counts for nothing.
	lf.keys["z"] = newKey(t)
	lf.at(lf.stmt("z", 1, wire.PhaseHeld, 2), 3)
	lf.said(lf.proc("z", 1, 2, 1, "z's"), 3)
	l, no := lf.decide(0, 1, 2, 3)
	require.Nil(t, no)
	require.Equal(t, lf.id("a"), l.Client)
	// If m also claims Held at servers 0 and 1 while a holds, a's lower
	// token still wins.
	lf.at(lf.stmt("m", 1, wire.PhaseHeld, 6), 0, 1)
	l, _ = lf.decide(0, 1, 2, 3)
	require.Equal(t, lf.id("a"), l.Client)
}

// A counting Ticket below the lowest Held means a handoff is under way;
// a Held reported only by faulty servers, or with bad signatures, or
// superseded by the same server's Exit, does not count.
func TestDecideLeaderHandoffAndBadReports(t *testing.T) {
	lf := newLeaderFixture(t, "a", "b")
	lf.at(lf.stmt("a", 1, wire.PhaseTicket, 5), 0, 1)
	lf.at(lf.stmt("b", 1, wire.PhaseHeld, 6), 0, 1, 2)
	lf.said(lf.proc("b", 1, 6, 1, "b's"), 0, 1, 2)
	_, no := lf.decide(0, 1, 2, 3)
	require.Contains(t, no.Reason, "handoff")
	require.Equal(t, lf.id("a"), no.Next)

	lf = newLeaderFixture(t, "a")
	bad := lf.stmt("a", 1, wire.PhaseHeld, 5)
	bad.Signed.Sig[0] ^= 1
	lf.at(bad, 0, 1, 2)
	badP := lf.proc("a", 1, 5, 1, "v")
	lf.said(badP, 0, 1, 2)
	_, no = lf.decide(0, 1, 2)
	require.Contains(t, no.Reason, "nobody holds", "bad signatures count for nothing")

	lf = newLeaderFixture(t, "a")
	lf.at(lf.stmt("a", 1, wire.PhaseHeld, 5), 0, 1, 2)
	lf.said(lf.proc("a", 1, 5, 1, "v"), 0, 1, 2)
	lf.at(lf.stmt("a", 1, wire.PhaseExit, 0), 1, 2)
	_, no = lf.decide(0, 1, 2)
	require.Contains(t, no.Reason, "nobody holds", "a server's newest value of a is its Exit")

	// A proclamation of another attempt never gives a value.
	lf = newLeaderFixture(t, "a")
	lf.at(lf.stmt("a", 2, wire.PhaseHeld, 5), 0, 1, 2)
	lf.said(lf.proc("a", 1, 5, 3, "old attempt"), 0, 1, 2)
	_, no = lf.decide(0, 1, 2)
	require.Contains(t, no.Reason, "has not proclaimed")
}

// A faulty server that stuffs its Status reply with statements no other
// server reports (here 2000 Helds of made-up clients, validly signed)
// changes nothing; BenchmarkDecideLeaderFlood measures what it costs.
func leaderFlood(tb testing.TB) *leaderFixture {
	lf := newLeaderFixture(tb, "a")
	for i := range 2000 {
		name := fmt.Sprint("fake", i)
		lf.keys[name] = newKeyTB(tb)
		lf.at(lf.stmt(name, 1, wire.PhaseHeld, 1), 3)
		lf.said(lf.proc(name, 1, 1, 1, "fake"), 3)
	}
	lf.at(lf.stmt("a", 1, wire.PhaseHeld, 5), 0, 1, 2)
	lf.said(lf.proc("a", 1, 5, 1, "a's"), 0, 1, 2)
	return lf
}

func TestDecideLeaderFlood(t *testing.T) {
	lf := leaderFlood(t)
	l, no := lf.decide(0, 1, 2, 3)
	require.Nil(t, no)
	require.Equal(t, lf.id("a"), l.Client)
	require.Equal(t, "a's", string(l.Value))
}

func BenchmarkDecideLeaderFlood(b *testing.B) {
	lf := leaderFlood(b)
	for b.Loop() {
		if l, _ := lf.decide(0, 1, 2, 3); l == nil {
			b.Fatal("no leader")
		}
	}
}

func newKeyTB(tb testing.TB) *crypto.PrivateKey {
	k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(tb, err)
	return k
}

// A value counts only when its signature verifies, even held by f+1 replies;
// and of each reply only the first wire.MaxStatusProclamations are read.
func TestDecideLeaderValueChecks(t *testing.T) {
	lf := newLeaderFixture(t, "a", "b", "c", "d", "e")
	lf.at(lf.stmt("a", 1, wire.PhaseHeld, 5), 0, 1, 2)
	bad := lf.proc("a", 1, 5, 2, "forged")
	bad.Signed.Sig[0] ^= 1
	lf.said(bad, 0, 1, 2)
	_, no := lf.decide(0, 1, 2)
	require.NotNil(t, no, "a proclamation whose signature fails never counts, however many replies hold it")
	require.Contains(t, no.Reason, "has not proclaimed")

	lf = newLeaderFixture(t, "a", "b", "c", "d", "e")
	lf.at(lf.stmt("a", 1, wire.PhaseHeld, 5), 0, 1, 2)
	for _, s := range []int{0, 1} { // behind four others': past what a reader looks at
		for _, o := range []string{"b", "c", "d", "e"} {
			lf.said(lf.proc(o, 1, 6, 1, o), s)
		}
	}
	lf.said(lf.proc("a", 1, 5, 1, "a's"), 0, 1, 2)
	_, no = lf.decide(0, 1, 2)
	require.NotNil(t, no, "only server 2 shows a's value within the first %d", wire.MaxStatusProclamations)
}
