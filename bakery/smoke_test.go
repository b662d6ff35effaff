package bakery_test

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

type net struct {
	t       *testing.T
	now     time.Time
	servers []*core.Core
	clients []*bakery.Client
	queue   []pkt
	events  []bakery.Event
	// drop, if set, loses the packets it returns true for.
	drop func(pkt) bool
}

type pkt struct {
	toServer bool
	from, to int
	data     []byte
}

func (n *net) clientOut(ci int, e bakery.Effects) {
	for _, s := range e.Send {
		b, err := wire.Encode(s.Msg)
		require.NoError(n.t, err)
		n.queue = append(n.queue, pkt{toServer: true, from: ci, to: int(s.To), data: b})
	}
	for _, ev := range e.Events {
		if ev.Kind != bakery.Ticketed {
			n.events = append(n.events, ev)
		}
	}
}

func (n *net) serverOut(si int, e core.Effects) {
	for _, o := range e.Send {
		b, err := wire.Encode(o.Msg)
		require.NoError(n.t, err)
		if o.To.IsClient {
			for ci, c := range n.clients {
				if c.ID() == o.To.Client {
					n.queue = append(n.queue, pkt{from: si, to: ci, data: b})
				}
			}
		} else {
			n.queue = append(n.queue, pkt{toServer: true, from: -1 - si, to: int(o.To.Server), data: b})
		}
	}
}

func (n *net) run() {
	for len(n.queue) > 0 {
		p := n.queue[0]
		n.queue = n.queue[1:]
		if n.drop != nil && n.drop(p) {
			continue
		}
		m, err := wire.Decode(p.data)
		require.NoError(n.t, err)
		n.now = n.now.Add(time.Millisecond)
		if p.toServer {
			from := wire.ServerPeer(wire.ServerID(-1 - p.from))
			if p.from >= 0 {
				from = wire.ClientPeer(n.clients[p.from].ID())
			}
			n.serverOut(p.to, n.servers[p.to].Step(n.now, core.Input{From: from, Msg: m}))
		} else {
			n.clientOut(p.to, n.clients[p.to].Step(n.now, wire.ServerID(p.from), m))
		}
	}
}

// newNet makes n = 4 servers and k started clients.
func newNet(t *testing.T, k int) *net { return newNetWith(t, k, nil) }

// newNetWith is newNet with each server's configuration changed by cfg.
func newNetWith(t *testing.T, k int, cfg func(*core.Config)) *net {
	return newNetOf(t, k, cfg, nil, nil)
}

// newNetOf is newNetWith with each client's config edited by ccfg too, and
// drop in place from the start.
func newNetOf(t *testing.T, k int, cfg func(*core.Config), ccfg func(*bakery.ClientConfig), drop func(pkt) bool) *net {
	const nsrv, f = 4, 1
	var pubs []*crypto.Parsed
	var signers []*crypto.PrivateKey
	for range nsrv {
		key, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
		require.NoError(t, err)
		pubs = append(pubs, key.Public)
		signers = append(signers, key)
	}
	keys := wire.NewKeyring(f, pubs)
	n := &net{t: t, now: time.Unix(1000, 0)}
	for i := range nsrv {
		conf := core.DefaultConfig(wire.ServerID(i), nsrv, f, keys, signers[i])
		if cfg != nil {
			cfg(&conf)
		}
		c, err := core.New(conf)
		require.NoError(t, err)
		n.servers = append(n.servers, c)
	}
	for range k {
		key, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
		require.NoError(t, err)
		cc := bakery.ClientConfig{Key: key, N: nsrv, F: f, Keys: keys, TTL: 5 * time.Second}
		if ccfg != nil {
			ccfg(&cc)
		}
		c, err := bakery.NewClient(cc)
		require.NoError(t, err)
		n.clients = append(n.clients, c)
		e, err := c.Start(n.now)
		require.NoError(t, err)
		n.clientOut(len(n.clients)-1, e)
	}
	n.drop = drop
	n.run()
	return n
}

func (n *net) lock(ci int) {
	e, err := n.clients[ci].Lock(n.now, "L", false)
	require.NoError(n.t, err)
	n.clientOut(ci, e)
	n.run()
}

func (n *net) unlock(ci int) {
	e, err := n.clients[ci].Unlock(n.now, "L")
	require.NoError(n.t, err)
	n.clientOut(ci, e)
	n.run()
}

// acquired lists the clients that acquired, in order.
func (n *net) acquired() []int {
	var out []int
	for _, ev := range n.events {
		if ev.Kind != bakery.Acquired {
			continue
		}
		for ci, c := range n.clients {
			if ev.Token.Client == c.ID() {
				out = append(out, ci)
			}
		}
	}
	return out
}

// Once a waiting client has passed a member (it exited), what that member
// does next cannot hold it up again: Lamport's loop checks each member once
// (docs/protocol.md §3.3). Here c0 re-enters and stays in its Doorway (its
// Views are lost); c2, which passed c0 when it exited, still enters after c1.
func TestPassedMemberStaysPassed(t *testing.T) {
	n := newNet(t, 3)
	n.lock(0)
	n.lock(1)
	n.lock(2)
	require.Equal(t, []int{0}, n.acquired())
	// c2 hears of c0's Exit from one server only: c0 is passable by its
	// Exit, not by the absence rule (which needs q servers).
	n.drop = func(p pkt) bool { return !p.toServer && p.to == 2 && p.from != 0 }
	n.unlock(0)
	require.Equal(t, []int{0, 1}, n.acquired(), "c1 next; c2 has passed c0 and waits for c1")
	n.drop = func(p pkt) bool { return !p.toServer && p.to == 0 } // c0 never hears back
	n.lock(0)
	n.unlock(1)
	require.Equal(t, []int{0, 1, 2}, n.acquired(), "c0's new Doorway must not stop c2")
}

func TestSmokeTwoClients(t *testing.T) {
	n := newNet(t, 2)
	require.True(t, n.clients[0].LeaseHolds(n.now))

	e, err := n.clients[0].Lock(n.now, "L", false)
	require.NoError(t, err)
	n.clientOut(0, e)
	n.run()
	require.Len(t, n.events, 1, "%v", n.events)
	require.Equal(t, bakery.Acquired, n.events[0].Kind)
	require.Equal(t, 2, n.clients[0].Accesses("L"))
	tok0 := n.events[0].Token

	e, err = n.clients[1].Lock(n.now, "L", false)
	require.NoError(t, err)
	n.clientOut(1, e)
	n.run()
	require.Len(t, n.events, 1, "client 1 must wait: %v", n.events)
	require.Equal(t, 3, n.clients[1].Accesses("L"))

	e, err = n.clients[0].Unlock(n.now, "L")
	require.NoError(t, err)
	n.clientOut(0, e)
	n.run()
	require.Len(t, n.events, 3, "%v", n.events)
	var acq *bakery.Event
	for i := range n.events[1:] {
		if n.events[1+i].Kind == bakery.Acquired {
			acq = &n.events[1+i]
		}
	}
	require.NotNil(t, acq, "%v", n.events)
	require.True(t, tok0.Less(acq.Token), "fencing tokens must increase: %s then %s", tok0, acq.Token)
	t.Log(n.events)
}

// docs/protocol.md §3.3: a server that refuses a LISTEN (a limit, a ban) will
// not report; its refusal counts as its answer. With one refusal c1 still
// waits for the q others; when refusals leave fewer than q servers that
// could report, the attempt fails at once with the reasons instead of
// waiting forever. A refusal never counts as a report.
func TestListenRefusals(t *testing.T) {
	for _, refusing := range [][]int{{1}, {1, 2}} {
		n := newNet(t, 2)
		n.lock(0)
		refuse := func(p pkt) bool {
			if !p.toServer || p.from != 1 {
				return false
			}
			m, err := wire.Decode(p.data)
			require.NoError(t, err)
			for _, s := range refusing {
				if m.Listen != nil && p.to == s {
					b, err := wire.Encode(&wire.Message{Error: &wire.Error{Req: m.Listen.Req, Code: wire.ErrCodeLimit, Detail: "too many listeners"}})
					require.NoError(t, err)
					n.queue = append(n.queue, pkt{from: s, to: 1, data: b})
					return true
				}
			}
			return false
		}
		n.drop = refuse
		n.lock(1)
		if len(refusing) == 1 {
			require.Equal(t, []int{0}, n.acquired())
			require.NotZero(t, n.clients[1].Attempt("L"), "c1 still waits: q servers can report")
			n.unlock(0)
			require.Equal(t, []int{0, 1}, n.acquired())
			continue
		}
		var failed *bakery.Event
		for i := range n.events {
			if n.events[i].Kind == bakery.Failed {
				failed = &n.events[i]
			}
		}
		require.NotNil(t, failed, "%v", n.events)
		require.ErrorIs(t, failed.Err, bakery.ErrListenRefused)
		require.ErrorContains(t, failed.Err, "too many listeners")
		require.Equal(t, []int{0}, n.acquired(), "never entered")
	}
}

// A server that answers every resend with another request to resend (it
// refuses what the client resends, or a faulty server repeats its errors)
// gets one resend per request, not a storm: each answer would otherwise
// breed another round without end (found by the simulator).
func TestResendAnsweredOncePerRequest(t *testing.T) {
	n := newNet(t, 2)
	n.lock(0)
	listens := 0
	n.drop = func(p pkt) bool {
		if !p.toServer || p.from != 1 || p.to != 1 {
			return false
		}
		m, err := wire.Decode(p.data)
		require.NoError(t, err)
		var req uint64
		switch {
		case m.Listen != nil:
			listens++
			req = m.Listen.Req
		case m.Submit != nil:
			req = m.Submit.Req
		default:
			return false
		}
		if listens > 20 {
			return true // a storm: stop feeding it so the test can fail
		}
		for range 3 { // echoed, as a faulty server may
			b, err := wire.Encode(&wire.Message{Error: &wire.Error{Req: req, Code: wire.ErrCodeResend, Detail: "resend"}})
			require.NoError(t, err)
			n.queue = append(n.queue, pkt{from: 1, to: 1, data: b})
		}
		return true
	}
	n.lock(1)
	require.LessOrEqual(t, listens, 3, "one Listen, and one resend per request")
	n.drop = nil
	n.unlock(0)
	require.Equal(t, []int{0, 1}, n.acquired(), "the other servers let c1 in")
}

// pushes sums the listener pushes the servers sent.
func (n *net) pushes() uint64 {
	var sum uint64
	for _, s := range n.servers {
		sum += s.Stats.Pushes
	}
	return sum
}

// Herd-free listening (docs/protocol.md change 27), end to end: with six
// clients queued on one lock, each handoff costs one push per server, to
// the next waiter, not one to every waiter behind the holder.
func TestNoHerdPerHandoff(t *testing.T) {
	const k = 6
	n := newNet(t, k)
	for ci := range k {
		n.lock(ci)
	}
	require.Equal(t, []int{0}, n.acquired())
	before := n.pushes()
	for ci := range k - 1 {
		n.unlock(ci)
	}
	require.Equal(t, []int{0, 1, 2, 3, 4, 5}, n.acquired(), "first come, first served")
	perHandoff := float64(n.pushes()-before) / float64(k-1)
	require.LessOrEqual(t, perHandoff, float64(len(n.servers)), "pushes per handoff")
}
