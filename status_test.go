package bq

import (
	"crypto/rand"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/internal/certstest"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// scriptedServers is a transport to n scripted servers: each acknowledges
// sessions, heartbeats and SessionClose at once, and answers Status with
// whatever onStatus returns (any server may claim to be any other: the
// client must check).
type scriptedServers struct {
	in       chan transport.Inbound
	onStatus func(to wire.ServerID, req *wire.Status) []transport.Inbound

	mu     sync.Mutex
	closed bool
}

func newScriptedServers(onStatus func(to wire.ServerID, req *wire.Status) []transport.Inbound) *scriptedServers {
	return &scriptedServers{in: make(chan transport.Inbound, 4096), onStatus: onStatus}
}

func (f *scriptedServers) Send(to transport.Peer, m *wire.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return transport.ErrClosed
	}
	reply := func(r *wire.Message) {
		f.in <- transport.Inbound{Kind: transport.EventMessage, From: to, Msg: r}
	}
	switch {
	case m.SessionOpen != nil:
		reply(&wire.Message{SessionAck: &wire.SessionAck{Session: m.SessionOpen.Session, LeaseOK: true}})
	case m.Heartbeat != nil:
		reply(&wire.Message{SessionAck: &wire.SessionAck{Session: m.Heartbeat.Session, Seq: m.Heartbeat.Seq, LeaseOK: true}})
	case m.SessionClose != nil:
		reply(&wire.Message{Ack: &wire.Ack{Req: m.SessionClose.Req}})
	case m.Status != nil:
		for _, in := range f.onStatus(to.Server, m.Status) {
			f.in <- in
		}
	}
	return nil
}

func (f *scriptedServers) Inbound() <-chan transport.Inbound { return f.in }

func (f *scriptedServers) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.in)
	}
	return nil
}

// A Byzantine server cannot crowd the correct servers out of a Status by
// repeating its reply, nor answer in another server's name, nor make up a
// holder: every member shown carries its client's valid signature.
func TestStatusByzantineServer(t *testing.T) {
	cl, err := certs.Init(certs.InitOptions{Dir: filepath.Join(t.TempDir(), "cluster"), Servers: 4, F: -1, Host: "127.0.0.1", PortBase: 7400}, time.Now(), rand.Reader)
	require.NoError(t, err)
	holder, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	require.NoError(t, err)
	framed, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	require.NoError(t, err)

	held, err := wire.SignStatement(holder, cl.ID(), &wire.Statement{Lock: "x", Client: wire.ClientID(holder.Public.ID), Session: 1, Attempt: 1, Phase: wire.PhaseHeld, N: 7})
	require.NoError(t, err)
	elsewhere, err := wire.SignStatement(framed, cl.ID(), &wire.Statement{Lock: "y", Client: wire.ClientID(framed.Public.ID), Session: 1, Attempt: 1, Phase: wire.PhaseHeld, N: 1})
	require.NoError(t, err)
	forged, err := wire.SignStatement(framed, cl.ID(), &wire.Statement{Lock: "x", Client: wire.ClientID(framed.Public.ID), Session: 1, Attempt: 1, Phase: wire.PhaseHeld, N: 1})
	require.NoError(t, err)
	forged.Signed.Sig = append([]byte(nil), forged.Signed.Sig...)
	forged.Signed.Sig[0] ^= 1

	msg := func(from wire.ServerID, r *wire.StatusReply) transport.Inbound {
		return transport.Inbound{Kind: transport.EventMessage, From: wire.ServerPeer(from), Msg: &wire.Message{StatusReply: r}}
	}
	servers := newScriptedServers(func(to wire.ServerID, req *wire.Status) []transport.Inbound {
		if to != 0 {
			return []transport.Inbound{msg(to, &wire.StatusReply{Req: req.Req, Server: to, Lock: req.Lock, Members: []wire.SignedStatement{held}})}
		}
		// Server 0 floods: its own reply many times, with a forged holder, a
		// statement about another lock and a suspicion, and replies in the
		// names of the others, which claim nobody holds the lock.
		var out []transport.Inbound
		for range 20 {
			out = append(out, msg(0, &wire.StatusReply{Req: req.Req, Server: 0, Lock: req.Lock,
				Members: []wire.SignedStatement{forged, elsewhere}, Suspects: []wire.ClientID{wire.ClientID(framed.Public.ID)}}))
			for s := wire.ServerID(1); s < 4; s++ {
				out = append(out, msg(0, &wire.StatusReply{Req: req.Req, Server: s, Lock: req.Lock}))
			}
		}
		return out
	})
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	require.NoError(t, err)
	c, err := Dial(ctxFor(t, waitTimeout), Config{Cluster: cl, Identity: key,
		newTransport: func(*crypto.PrivateKey, *certs.Cluster) (transport.Transport, error) { return servers, nil }})
	require.NoError(t, err)
	defer c.Close()

	for range 5 {
		st, err := c.Status(ctxFor(t, waitTimeout), "x")
		require.NoError(t, err)
		require.Equal(t, 4, st.Reachable, "every server's reply counts once")
		require.Equal(t, 1, st.FaultsTolerated)
		ls := st.Lock
		require.NotNil(t, ls.Holder, describe(ls))
		require.Equal(t, wire.ClientID(holder.Public.ID), ls.Holder.Client)
		require.Equal(t, uint64(7), ls.Holder.Ticket)
		require.Equal(t, 3, ls.Holder.ReportedBy)
		require.Empty(t, ls.Queue, "a forged statement is not shown: %s", describe(ls))
		require.Equal(t, []Flagged{{Client: wire.ClientID(framed.Public.ID), ReportedBy: 1}}, ls.Suspected)
		require.Empty(t, ls.Banned)
	}
}

// A server that cut its list of locks at its reply limit says so (More), and
// the combined Status says the list may be incomplete instead of passing it
// off as every lock.
func TestStatusLocksTruncated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	cl, err := certs.Init(certs.InitOptions{Dir: dir, Servers: 4, F: -1, Host: "127.0.0.1", PortBase: 20000}, time.Now(), rand.Reader)
	require.NoError(t, err)
	c := &Client{cluster: cl}
	replies := map[wire.ServerID]*wire.StatusReply{
		0: {Server: 0, Locks: []wire.LockSummary{{Name: "a", Members: 1}}},
		1: {Server: 1, Locks: []wire.LockSummary{{Name: "a", Members: 2}, {Name: "b", Members: 1}}, More: true},
	}
	v := view{ids: []wire.ServerID{0, 1, 2, 3}, f: 1, q: 3}
	st := c.combine("", replies, v, cl.Addresses())
	require.True(t, st.LocksTruncated)
	require.Equal(t, []LockSummary{{Name: "a", Members: 2}, {Name: "b", Members: 1}}, st.Locks)
	delete(replies, 1)
	require.False(t, c.combine("", replies, v, cl.Addresses()).LocksTruncated)
}

// A Status that the news of a change reaches while it waits asks the new
// epoch's members and shows their replies, not the sealed epoch's (issue
// 44, docs/protocol.md change 56): the old members all answer first, f+1 of
// them knowing epoch 1, and one of them shows it. One server alone naming a
// later epoch delays nothing.
func TestStatusFollowsAMoveWhileItWaits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	cl, err := certs.Init(certs.InitOptions{Dir: dir, Servers: 4, F: -1, Host: "127.0.0.1", PortBase: 7400}, time.Now(), rand.Reader)
	require.NoError(t, err)
	three := wire.ServerID(3)
	p, err := certs.PlanChange(dir, certs.Change{Remove: &three, Add: true}, time.Now(), rand.Reader)
	require.NoError(t, err)
	certstest.WriteEndorsed(t, dir, p)
	epochs, err := certs.ReadEpochs(dir)
	require.NoError(t, err)
	holder, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	require.NoError(t, err)
	held, err := wire.SignStatement(holder, cl.ID(), &wire.Statement{Lock: "x", Client: wire.ClientID(holder.Public.ID), Session: 1, Attempt: 1, Phase: wire.PhaseHeld, N: 7})
	require.NoError(t, err)

	var mu sync.Mutex
	aheadOf0 := 2 // how many epoch-0 members name epoch 1 (f+1 = 2)
	servers := newScriptedServers(func(to wire.ServerID, req *wire.Status) []transport.Inbound {
		mu.Lock()
		defer mu.Unlock()
		reply := func(r *wire.StatusReply) transport.Inbound {
			return transport.Inbound{Kind: transport.EventMessage, From: wire.ServerPeer(to), Msg: &wire.Message{StatusReply: r}}
		}
		if req.Epoch == 0 {
			r := &wire.StatusReply{Req: req.Req, Server: to, Lock: req.Lock}
			if int(to) < aheadOf0 {
				r.Knows = 1
			}
			out := []transport.Inbound{reply(r)}
			if to == 0 && aheadOf0 > 1 {
				out = append(out, transport.Inbound{Kind: transport.EventMessage, From: wire.ServerPeer(to), Msg: &wire.Message{EpochNews: wire.NewsOf(epochs)}})
			}
			return out
		}
		return []transport.Inbound{reply(&wire.StatusReply{Req: req.Req, Server: to, Lock: req.Lock, Serves: 1, Knows: 1, Members: []wire.SignedStatement{held}})}
	})
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	require.NoError(t, err)

	// One alone names epoch 1, and shows nothing: the status is epoch 0's, at once.
	mu.Lock()
	aheadOf0 = 1
	mu.Unlock()
	obs, err := Dial(ctxFor(t, waitTimeout), Config{Cluster: cl, Identity: key, TTL: time.Second,
		newTransport: func(*crypto.PrivateKey, *certs.Cluster) (transport.Transport, error) { return servers, nil }})
	require.NoError(t, err)
	defer obs.Close()
	began := time.Now()
	st, err := obs.Status(ctxFor(t, waitTimeout), "x")
	require.NoError(t, err)
	// A Status that waited for the move (which never comes: one server
	// alone names epoch 1) returns at its own 2 s cap, never before; all
	// four replies are here at once. So 2 s is the most room -race on 2
	// cores can be given while telling the two apart.
	require.Less(t, time.Since(began), 2*time.Second, "one server naming a later epoch delays nothing")
	require.Equal(t, uint64(0), st.Epoch)

	mu.Lock()
	aheadOf0 = 2
	mu.Unlock()
	st, err = obs.Status(ctxFor(t, waitTimeout), "x")
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.Epoch)
	require.Equal(t, 4, st.Reachable)
	var ids []wire.ServerID
	for _, s := range st.Servers {
		require.True(t, s.Reachable, "server %d", s.ID)
		ids = append(ids, s.ID)
	}
	require.Equal(t, []wire.ServerID{0, 1, 2, 4}, ids)
	require.NotNil(t, st.Lock.Holder, "the new epoch's replies are the ones shown")
	require.Equal(t, 4, st.Lock.Holder.ReportedBy)
}
