package sim

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/internal/testutil"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// A replace under contention, end to end in one process (docs/protocol.md
// change 43): servers 0–3 and a new server 4, two bakery clients, every
// message encoded. Client a holds L and b waits on it when the operator
// shows epoch 1 (server 3 replaced by server 4) to server 0. Every member of
// epoch 1 seals and copies, each client is moved by the servers that sealed
// (b starts its attempt over in epoch 1, a keeps its holding and its lease
// never lapses), and once a unlocks, b holds L with a higher token. The
// removed server keeps talking and counts for nothing.
func TestReplaceUnderContention(t *testing.T) {
	const ttl = 2 * time.Second
	ca := mustKey(t)
	var signers []*crypto.PrivateKey
	var pubs []*crypto.Parsed
	for range 4 {
		k := mustKey(t)
		signers, pubs = append(signers, k), append(pubs, k.Public)
	}
	keys := wire.NewKeyring(1, pubs)
	k4 := mustKey(t)
	var members []wire.EpochMember
	for _, id := range []int{0, 1, 2, 4} {
		pub := k4.Public
		if id < 4 {
			pub = pubs[id]
		}
		members = append(members, wire.EpochMember{ID: wire.ServerID(id), Address: "127.0.0.1:7000", Key: pub.Wire, Cert: []byte{0x30}})
	}
	oneSigned, err := wire.SignEpoch(ca, &wire.EpochBody{Cluster: keys.Cluster, Number: 1, Prev: [32]byte(keys.Cluster), Members: members, F: 1})
	require.NoError(t, err)
	one := testutil.Endorse(oneSigned, keys.Cluster, 1, map[wire.ServerID]*crypto.PrivateKey{0: signers[0], 1: signers[1], 2: signers[2]})

	servers := map[wire.ServerID]*core.Core{}
	for i := range 4 {
		cfg := core.DefaultConfig(wire.ServerID(i), 4, 1, keys, signers[i])
		cfg.ClusterCA, cfg.DefaultTTL = ca.Public, ttl
		k, err := core.New(cfg)
		require.NoError(t, err)
		servers[wire.ServerID(i)] = k
	}

	type msg struct {
		toServer bool
		server   wire.ServerID // the server sending to a client, or receiving
		from     wire.Peer     // the sender, to a server
		client   int
		data     []byte
	}
	var queue []msg
	now := time.Unix(1_700_000_000, 0)
	var clients []*bakery.Client
	events := map[int][]bakery.Event{}
	fromServer := func(s wire.ServerID, e core.Effects) {
		for _, o := range e.Send {
			b, err := wire.Encode(o.Msg)
			require.NoError(t, err)
			if o.To.IsClient {
				for i, c := range clients {
					if c.ID() == o.To.Client {
						queue = append(queue, msg{server: s, client: i, data: b})
					}
				}
			} else {
				queue = append(queue, msg{toServer: true, server: o.To.Server, from: wire.ServerPeer(s), data: b})
			}
		}
	}
	fromClient := func(i int, e bakery.Effects) {
		events[i] = append(events[i], e.Events...)
		for _, s := range e.Send {
			b, err := wire.Encode(s.Msg)
			require.NoError(t, err)
			queue = append(queue, msg{toServer: true, server: s.To, from: wire.ClientPeer(clients[i].ID()), data: b})
		}
	}
	for range 2 {
		c, err := bakery.NewClient(bakery.ClientConfig{Key: mustKey(t), N: 4, F: 1, Keys: keys, TTL: ttl, ClusterCA: ca.Public})
		require.NoError(t, err)
		clients = append(clients, c)
	}
	for i, c := range clients {
		e, err := c.Start(now)
		require.NoError(t, err)
		fromClient(i, e)
	}
	nextTick := now
	step := func(d time.Duration, until func() bool) {
		end := now.Add(d)
		for now.Before(end) && !until() {
			now = now.Add(time.Millisecond)
			if !now.Before(nextTick) {
				nextTick = now.Add(50 * time.Millisecond)
				for s, k := range servers {
					fromServer(s, k.Tick(now))
				}
				for i, c := range clients {
					fromClient(i, c.Tick(now))
				}
			}
			for n := len(queue); n > 0; n-- {
				m := queue[0]
				queue = queue[1:]
				decoded, err := wire.Decode(m.data)
				require.NoError(t, err)
				if m.toServer {
					fromServer(m.server, servers[m.server].Step(now, core.Input{From: m.from, Msg: decoded}))
				} else {
					fromClient(m.client, clients[m.client].Step(now, m.server, decoded))
				}
			}
		}
	}
	run := func(d time.Duration, until func() bool) {
		t.Helper()
		step(d, until)
		require.True(t, until(), "not reached in %v", d)
	}
	never := func() bool { return false }
	has := func(i int, k bakery.EventKind) func() bool {
		return func() bool {
			for _, ev := range events[i] {
				if ev.Kind == k {
					return true
				}
			}
			return false
		}
	}
	token := func(i int) bakery.Token {
		for _, ev := range events[i] {
			if ev.Kind == bakery.Acquired {
				return ev.Token
			}
		}
		return bakery.Token{}
	}

	e, err := clients[0].Lock(now, "L", false)
	require.NoError(t, err)
	fromClient(0, e)
	run(5*time.Second, has(0, bakery.Acquired))
	e, err = clients[1].Lock(now, "L", false)
	require.NoError(t, err)
	fromClient(1, e)
	step(500*time.Millisecond, never)
	require.False(t, has(1, bakery.Acquired)(), "b waits while a holds")

	// The operator starts server 4 with its material and shows epoch 1 to
	// server 0.
	cfg := core.DefaultConfig(4, 4, 1, keys, k4)
	cfg.ClusterCA, cfg.Epochs, cfg.DefaultTTL = ca.Public, []wire.Epoch{one}, ttl
	s4, err := core.New(cfg)
	require.NoError(t, err)
	servers[4] = s4
	b, err := wire.Encode(&wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one})})
	require.NoError(t, err)
	queue = append(queue, msg{toServer: true, server: 0, from: wire.ClientPeer(clients[0].ID()), data: b})
	moved := func() bool {
		for s, k := range servers {
			if serves, _ := k.Epoch(); s != 3 && serves != 1 {
				return false
			}
		}
		return clients[0].Epoch() == 1 && clients[1].Epoch() == 1
	}
	run(10*time.Second, moved)
	require.False(t, has(1, bakery.Acquired)(), "b still waits: a holds L across the change")
	require.False(t, has(0, bakery.Lost)(), "a's holding survives the change")
	require.True(t, clients[0].LeaseHolds(now))

	// Some TTLs later a still holds: its lease is acked in epoch 1.
	step(3*ttl, never)
	require.False(t, has(0, bakery.Lost)())
	require.False(t, has(1, bakery.Acquired)())
	require.True(t, clients[0].LeaseHolds(now))

	e, err = clients[0].Unlock(now, "L")
	require.NoError(t, err)
	fromClient(0, e)
	run(10*time.Second, has(1, bakery.Acquired))
	require.True(t, has(0, bakery.Released)())
	require.Greater(t, token(1).N, token(0).N, "fencing tokens go up across the change")
	for i, c := range clients {
		require.Equal(t, uint64(1), c.Stats.EpochMoves, "client %d moved once", i)
	}
	var acquired bakery.Event
	for _, ev := range events[1] {
		if ev.Kind == bakery.Acquired {
			acquired = ev
		}
	}
	require.Equal(t, uint64(2), acquired.Attempt, "b's attempt started over in epoch 1")
	require.Equal(t, uint64(1), token(0).N)
	t.Logf("a: %v; b: %v; b's token %s after a's %s", events[0], events[1], token(1), token(0))
}

func mustKey(t *testing.T) *crypto.PrivateKey {
	k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	return k
}
