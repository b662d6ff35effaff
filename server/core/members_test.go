package core

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// The replies a waiting client needs fit in one frame at the member cap,
// whatever the schemes (change 25): a MembersReply of memberFit statements
// of the largest client scheme, and a Listen snapshot of memberFit reset
// certificates of q votes of the servers' scheme. One more entry would not
// be guaranteed to fit, which is why the cap is what it is.
func TestFullRepliesFitInAFrame(t *testing.T) {
	name := strings.Repeat("x", wire.MaxLockName)
	var h wire.Digest
	big := mustKey(crypto.Ed25519Dilithium2)
	stmt, err := wire.SignStatement(big, wire.ClusterID{}, &wire.Statement{Lock: name, Client: wire.ClientID(big.Public.ID),
		Session: ^uint64(0), Attempt: ^uint64(0), Phase: wire.PhaseTicket, N: 1<<62 - 1, JHash: &h})
	require.NoError(t, err)
	for _, scheme := range crypto.Schemes() {
		for _, n := range []int{4, 7, 10} {
			q := n - (n-1)/3
			fit := memberFit(crypto.MaxMessageSize, q, scheme)
			t.Logf("%s n=%d: %d members", scheme, n, fit)
			members := make([]wire.SignedStatement, fit)
			for i := range members {
				members[i] = stmt
			}
			b, err := wire.Encode(&wire.Message{MembersReply: &wire.MembersReply{Req: ^uint64(0), Lock: name, Members: members}})
			require.NoError(t, err, "%s n=%d", scheme, n)
			require.LessOrEqual(t, len(b), crypto.MaxMessageSize)

			vote, err := wire.SignSuspect(mustKey(scheme), wire.ClusterID{}, &wire.SuspectBody{Session: ^uint64(0), Server: ^wire.ServerID(0), Reason: wire.SuspectMute})
			require.NoError(t, err)
			cert := wire.ResetCertificate{Session: ^uint64(0)}
			for range q {
				cert.Votes = append(cert.Votes, vote)
			}
			u := &wire.Update{Req: ^uint64(0), Lock: name, Seq: ^uint64(0)}
			for i := range fit {
				u.Absent = append(u.Absent, wire.ClientID{byte(i), byte(i >> 8)})
				u.Resets = append(u.Resets, cert)
			}
			b, err = wire.Encode(&wire.Message{Update: u})
			require.NoError(t, err, "%s n=%d", scheme, n)
			require.LessOrEqual(t, len(b), crypto.MaxMessageSize, fmt.Sprintf("%s n=%d", scheme, n))
		}
	}
}

// A lock takes no new member past the cap, with a Limit that names it; its
// members go on, and an Exit makes room (change 25).
func TestLockMembersCapped(t *testing.T) {
	c := newCluster(t, 4, 1)
	k := c.cores[0]
	k.memberCap = 2
	a, b, x := c.newClient(), c.newClient(), c.newClient()
	for _, cl := range []*client{a, b, x} {
		c.fromClient(0, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
		c.replies(cl.id)
	}
	for _, cl := range []*client{a, b} {
		c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: cl.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)}})
		require.Empty(t, errorCodes(c.replies(cl.id)))
	}
	c.fromClient(0, x.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: x.stmt("L", 1, 1, wire.PhaseDoorway, 0, nil)}})
	rs := c.replies(x.id)
	require.Equal(t, &wire.Limit{Name: "max_lock_members", Value: 2}, limitOf(t, rs))
	require.Contains(t, rs[0].Error.Detail, `lock "L" has 2 members`)
	require.False(t, isMember(k, "L", x.id))

	c.fromClient(0, a.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: a.stmt("L", 1, 1, wire.PhaseExit, 0, nil)}})
	c.fromClient(0, x.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: x.stmt("L", 1, 2, wire.PhaseDoorway, 0, nil)}})
	require.Empty(t, errorCodes(c.replies(x.id)))
	require.True(t, isMember(k, "L", x.id))
}

// docs/protocol.md change 44: a Ticket whose Submit asks for references is
// answered with the waiting members' ids and the other statements (a
// holder's, a Doorway's); the same Ticket again without (a duplicate), with
// every statement.
func TestMembersReplyByReference(t *testing.T) {
	c := newCluster(t, 4, 1)
	h, w, me := c.newClient(), c.newClient(), c.newClient()
	members := func(cl *client) *wire.MembersReply {
		for _, m := range c.replies(cl.id) {
			if m.MembersReply != nil {
				return m.MembersReply
			}
		}
		t.Fatal("no MembersReply")
		return nil
	}
	ticket := func(cl *client, n uint64, refs bool) (wire.SignedStatement, []wire.SignedView) {
		j := c.doorway(cl, "L", 1, 1)
		tk := cl.stmt("L", 1, 1, wire.PhaseTicket, n, j)
		c.fromClient(0, cl.id, &wire.Message{Submit: &wire.Submit{Req: 2, Statement: tk, J: j, Refs: refs}})
		return tk, j
	}
	ticket(h, 1, false)
	require.Len(t, members(h).Members, 1)
	c.fromClient(0, h.id, &wire.Message{Submit: &wire.Submit{Req: 3, Statement: h.stmt("L", 1, 1, wire.PhaseHeld, 1, nil)}})
	ticket(w, 2, false)
	members(w)
	d := c.newClient()
	c.doorway(d, "L", 1, 1) // choosing

	tk, j := ticket(me, 3, true)
	r := members(me)
	require.Len(t, r.Members, 2, "the holder's statement and the Doorway")
	require.ElementsMatch(t, []wire.ClientID{h.id, d.id}, []wire.ClientID{wire.ClientID(r.Members[0].Key.Fingerprint()), wire.ClientID(r.Members[1].Key.Fingerprint())})
	require.ElementsMatch(t, []wire.ClientID{w.id, me.id}, r.Clients, "the waiters by id")

	c.fromClient(0, me.id, &wire.Message{Submit: &wire.Submit{Req: 4, Statement: tk, J: j}})
	r = members(me)
	require.Len(t, r.Members, 4, "in full")
	require.Empty(t, r.Clients)
}
