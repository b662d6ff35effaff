package core

import (
	"crypto/rand"
	"sort"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// cluster is a tiny harness: n cores, messages delivered by hand, every
// message encoded and decoded on the way.
type cluster struct {
	t       *testing.T
	now     time.Time
	keys    wire.Keyring
	signers []*crypto.PrivateKey
	cores   []*Core
	disks   []map[string]map[string][]byte
	// toClients collects what servers sent to clients.
	toClients []Outgoing
	// inflight holds server-to-server messages not yet delivered.
	inflight []serverMsg
	// clientCA, if set before the cores are made, closes the cluster (change 23).
	clientCA *crypto.PrivateKey
	// approver, if set before the cores are made, is an open cluster's
	// operator key, which approves epochs (change 65).
	approver *crypto.PrivateKey
	// maxHold, if set before the cores are made, is their default max-hold (change 24).
	maxHold time.Duration
	// clusterCA, if set before the cores are made, signs epochs (change 43).
	clusterCA *crypto.PrivateKey
	// configs: what each core was made with, which a restart makes it with again.
	configs map[int]Config
	// endorsers, if set before the cores are made, are the servers'
	// endorsement keys (change 64; withEndorsers).
	endorsers []*wire.Endorser
}

type serverMsg struct {
	from, to wire.ServerID
	data     []byte
}

func newCluster(t *testing.T, n, f int) *cluster {
	c := &cluster{t: t, now: time.Unix(1_000_000, 0)}
	for range n {
		k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
		require.NoError(t, err)
		c.keys.Servers = append(c.keys.Servers, k.Public)
		c.signers = append(c.signers, k)
	}
	c.keys = wire.NewKeyring(f, c.keys.Servers)
	for i := range n {
		c.cores = append(c.cores, c.newCore(i, n, f))
		c.disks = append(c.disks, map[string]map[string][]byte{})
	}
	return c
}

func (c *cluster) newCore(i, n, f int) *Core {
	cfg := DefaultConfig(wire.ServerID(i), n, f, c.keys, c.signers[i])
	if c.clientCA != nil {
		cfg.ClientCA = c.clientCA.Public
	}
	if c.approver != nil {
		cfg.Approver = c.approver.Public
	}
	cfg.MaxHold = c.maxHold
	if c.clusterCA != nil {
		cfg.ClusterCA = c.clusterCA.Public
	}
	if i < len(c.endorsers) {
		cfg.Endorser = c.endorsers[i]
	}
	return c.newCoreOf(i, cfg)
}

// newCoreOf makes core i of cfg.
func (c *cluster) newCoreOf(i int, cfg Config) *Core {
	k, err := New(cfg)
	require.NoError(c.t, err)
	if c.configs == nil {
		c.configs = map[int]Config{}
	}
	c.configs[i] = cfg
	return k
}

func roundTrip(t *testing.T, m *wire.Message) *wire.Message {
	b, err := wire.Encode(m)
	require.NoError(t, err)
	out, err := wire.Decode(b)
	require.NoError(t, err)
	return out
}

func (c *cluster) effects(from int, e Effects) {
	disk := c.disks[from]
	for _, r := range e.Persist {
		if disk[r.Bucket] == nil {
			disk[r.Bucket] = map[string][]byte{}
		}
		if r.Delete {
			delete(disk[r.Bucket], string(r.Key))
		} else {
			disk[r.Bucket][string(r.Key)] = r.Value
		}
	}
	for _, o := range e.Send {
		if o.To.IsClient {
			c.toClients = append(c.toClients, Outgoing{To: o.To, Msg: roundTrip(c.t, o.Msg)})
			continue
		}
		b, err := wire.Encode(o.Msg)
		require.NoError(c.t, err)
		c.inflight = append(c.inflight, serverMsg{from: wire.ServerID(from), to: o.To.Server, data: b})
	}
}

// fromClient delivers m from client id to server s.
func (c *cluster) fromClient(s int, id wire.ClientID, m *wire.Message) {
	c.now = c.now.Add(time.Millisecond)
	c.effects(s, c.cores[s].Step(c.now, Input{From: wire.ClientPeer(id), Msg: roundTrip(c.t, m)}))
}

// fromServer delivers m as if server from sent it to server s.
func (c *cluster) fromServer(s int, from wire.ServerID, m *wire.Message) {
	c.now = c.now.Add(time.Millisecond)
	c.effects(s, c.cores[s].Step(c.now, Input{From: wire.ServerPeer(from), Msg: roundTrip(c.t, m)}))
}

// flush delivers server-to-server messages until none are left (those to a
// server no core plays are lost, as to one not running).
func (c *cluster) flush() {
	for steps := 0; len(c.inflight) > 0; steps++ {
		// Servers that answer each other for ever are a bug: say so
		// instead of spinning until the test times out.
		require.Less(c.t, steps, 100000, "messages between servers never settle")
		m := c.inflight[0]
		c.inflight = c.inflight[1:]
		if int(m.to) >= len(c.cores) || c.cores[m.to] == nil {
			continue
		}
		msg, err := wire.Decode(m.data)
		require.NoError(c.t, err)
		c.now = c.now.Add(time.Millisecond)
		c.effects(int(m.to), c.cores[m.to].Step(c.now, Input{From: wire.ServerPeer(m.from), Msg: msg}))
	}
}

// drop forgets server-to-server messages in flight.
func (c *cluster) drop() { c.inflight = nil }

// replies takes what servers sent to client id so far.
func (c *cluster) replies(id wire.ClientID) []*wire.Message {
	var out []*wire.Message
	keep := c.toClients[:0]
	for _, o := range c.toClients {
		if o.To.Client == id {
			out = append(out, o.Msg)
		} else {
			keep = append(keep, o)
		}
	}
	c.toClients = keep
	return out
}

// restart rebuilds server s from its disk.
func (c *cluster) restart(s int) {
	k := c.newCoreOf(s, c.configs[s])
	require.NoError(c.t, k.Restore(mapReader(c.disks[s])))
	c.cores[s] = k
}

type mapReader map[string]map[string][]byte

func (m mapReader) ForEach(bucket string, fn func(k, v []byte) error) error {
	keys := make([]string, 0, len(m[bucket]))
	for k := range m[bucket] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := fn([]byte(k), m[bucket][k]); err != nil {
			return err
		}
	}
	return nil
}

// client is a hand-driven client identity.
type client struct {
	t       *testing.T
	key     *crypto.PrivateKey
	id      wire.ClientID
	cluster wire.ClusterID
	holding wire.Holding // the mode of its statements but Exits (change 60)
}

// newClient makes a client of this cluster (its statements name its id).
func (c *cluster) newClient() *client {
	k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(c.t, err)
	return &client{t: c.t, key: k, id: wire.ClientID(k.Public.ID), cluster: c.keys.Cluster}
}

func (cl *client) stmt(lock string, sess, att uint64, ph wire.Phase, n uint64, j []wire.SignedView) wire.SignedStatement {
	st := &wire.Statement{Lock: lock, Client: cl.id, Session: sess, Attempt: att, Phase: ph, N: n}
	if ph != wire.PhaseExit {
		st.Mode, st.Permits = cl.holding.Mode, cl.holding.Permits
	}
	if ph == wire.PhaseTicket {
		h := wire.JustificationHash(j)
		st.JHash = &h
	}
	ss, err := wire.SignStatement(cl.key, cl.cluster, st)
	require.NoError(cl.t, err)
	return ss
}

// doorway runs GET-TICKET of cl at every server and returns the first q views.
func (c *cluster) doorway(cl *client, lock string, sess, att uint64) []wire.SignedView {
	d := cl.stmt(lock, sess, att, wire.PhaseDoorway, 0, nil)
	var j []wire.SignedView
	for s := range c.cores {
		c.fromClient(s, cl.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: sess, TTLMillis: 5000}})
		c.fromClient(s, cl.id, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: d}})
	}
	for _, m := range c.replies(cl.id) {
		if m.ViewReply != nil && len(j) < c.cores[0].q {
			j = append(j, m.ViewReply.View)
		}
	}
	require.Len(c.t, j, c.cores[0].q)
	return j
}

// isMember reports whether c is in lock's active set at k (a lock k no
// longer keeps has no members).
func isMember(k *Core, lock string, c wire.ClientID) bool {
	l := k.locks[lock]
	return l != nil && l.IsMember(c)
}
