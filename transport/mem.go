package transport

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// MemNetwork is an in-memory network for tests. It behaves like the QUIC
// transport as seen through the Transport interface — same events, same
// errors, same bounds — but every message still goes through wire.Encode on
// Send and wire.Decode on delivery, so a test can tamper with real bytes
// (SetTamper) and a peer's bad bytes give EventBadInput exactly as over QUIC.
//
// The model, which mirrors quic.go:
//   - Servers talk to every other server; clients talk to every server, never
//     to each other. A client is bound to the ClientID of its key (the Hello
//     exchange is skipped, the binding is not). An endpoint is
//     Reconfigurable: once SetServers named its servers, it talks to those
//     only (addresses play no part but a change of one re-dials), and a
//     server's link with another is up only while each names the other, as a
//     QUIC server refuses one it does not name.
//   - Each server has its own outbound link to every other server; a
//     server's EventConnected/EventDisconnected about server j follow the link
//     it sends on. A client and a server share one link in both directions;
//     both ends get the events.
//   - Links carry frames FIFO. A link that drops (Partition, Bounce, a peer
//     closing, bad input, a slow consumer) loses the frames in flight. Frames
//     sent to a server while the link is down wait (at most QueueLen) and go
//     out when it is back; Send to a client without a link is ErrNotConnected.
//   - A link that dropped because of bad input or a slow client comes back at
//     once, as a QUIC peer would reconnect; a cut link (Partition, Isolate, a
//     closed peer) comes back when the cut is healed or the peer restarts.
//
// Every method is safe for concurrent use.
type MemNetwork struct {
	mu       sync.Mutex
	lim      Limits
	tamper   func(from, to Peer, frame []byte) []byte
	eps      map[Peer]*memEndpoint // live endpoints
	known    map[wire.ServerID]bool
	links    []*memLink // in creation order, so refreshes are deterministic
	linkOf   map[[2]Peer]*memLink
	cuts     map[[2]Peer]bool // both orders
	isolated map[Peer]bool
	// observes: the client each observer endpoint observes as (change 32).
	observes  map[Peer]*wire.ClientID
	observers int // observer endpoints made, for their ids
}

// NewMemNetwork makes an empty network with the default Limits.
func NewMemNetwork() *MemNetwork {
	lim, _ := Limits{}.withDefaults()
	return &MemNetwork{
		lim:      lim,
		eps:      make(map[Peer]*memEndpoint),
		known:    make(map[wire.ServerID]bool),
		linkOf:   make(map[[2]Peer]*memLink),
		cuts:     make(map[[2]Peer]bool),
		isolated: make(map[Peer]bool),
		observes: make(map[Peer]*wire.ClientID),
	}
}

// SetLimits sets the limits of endpoints created from now on.
func (nw *MemNetwork) SetLimits(l Limits) error {
	l, err := l.withDefaults()
	if err != nil {
		return err
	}
	nw.mu.Lock()
	nw.lim = l
	nw.mu.Unlock()
	return nil
}

// SetTamper installs f (nil removes it). Every frame sent from then on passes
// through f, which may return it unchanged, rewrite it (the receiver decodes
// whatever f returns), or return nil to drop it. f runs on the sender's
// goroutine, outside the network's lock, and must be safe for concurrent use.
func (nw *MemNetwork) SetTamper(f func(from, to Peer, frame []byte) []byte) {
	nw.mu.Lock()
	nw.tamper = f
	nw.mu.Unlock()
}

// Server attaches server id. It panics if server id is already live (a test
// bug); after its Close, Server(id) again is a restart: peers reconnect.
func (nw *MemNetwork) Server(id wire.ServerID) Transport {
	return nw.attach(ServerPeer(id))
}

// Client attaches a client bound to the ClientID of key. It panics if a
// client with that key is already live.
func (nw *MemNetwork) Client(key *crypto.PrivateKey) Transport {
	return nw.attach(ClientPeer(wire.ClientID(key.Public.ID)))
}

// Observer attaches an observer of the client of key (docs/protocol.md
// change 32), bound to an ObserverID of its own as a QUIC server binds one;
// servers learn whom it observes as with its EventConnected. Its id is
// From of what the servers see (Transport.Self of the endpoint's peer).
func (nw *MemNetwork) Observer(key *crypto.PrivateKey) (Transport, wire.ClientID) {
	parent := wire.ClientID(key.Public.ID)
	nw.mu.Lock()
	nw.observers++
	id := wire.ObserverID(parent, fmt.Appendf(nil, "mem-observer-%d", nw.observers))
	nw.observes[ClientPeer(id)] = &parent
	nw.mu.Unlock()
	return nw.attach(ClientPeer(id)), id
}

// Partition cuts the links between a and b (both directions) until Heal.
func (nw *MemNetwork) Partition(a, b Peer) {
	a, b = norm(a), norm(b)
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.cuts[[2]Peer{a, b}] = true
	nw.cuts[[2]Peer{b, a}] = true
	nw.refreshLocked()
}

// Heal undoes Partition(a, b).
func (nw *MemNetwork) Heal(a, b Peer) {
	a, b = norm(a), norm(b)
	nw.mu.Lock()
	defer nw.mu.Unlock()
	delete(nw.cuts, [2]Peer{a, b})
	delete(nw.cuts, [2]Peer{b, a})
	nw.refreshLocked()
}

// Isolate cuts every link of p until HealAll.
func (nw *MemNetwork) Isolate(p Peer) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.isolated[norm(p)] = true
	nw.refreshLocked()
}

// HealAll undoes every Partition and Isolate.
func (nw *MemNetwork) HealAll() {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	clear(nw.cuts)
	clear(nw.isolated)
	nw.refreshLocked()
}

// Bounce drops every link of p at once — the frames in flight are lost — and
// lets them come straight back, like a network blip followed by reconnects.
func (nw *MemNetwork) Bounce(p Peer) {
	p = norm(p)
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for _, l := range nw.links {
		if l.up && (l.from == p || l.to == p) {
			nw.setLinkLocked(l, false)
		}
	}
	nw.refreshLocked()
}

// memLink carries frames from one peer to another.
//
// INVARIANT: pending/pendingBytes count the frames of generation gen waiting
// in the queue of the endpoint of to; held is empty unless the link is down
// and to is a server.
type memLink struct {
	from, to              Peer
	up                    bool
	gen                   uint64 // changes whenever the link goes up or down
	pending, pendingBytes int
	held                  [][]byte
	heldBytes             int
}

// eventTarget names who hears about this link going up or down, and about whom.
func (l *memLink) eventTarget() (target, about Peer) {
	if !l.from.IsClient && !l.to.IsClient {
		return l.from, l.to // a server's own outbound link
	}
	return l.to, l.from // a client connection: each end hears from the link into it
}

type memItem struct {
	ev    Inbound // an event, when link is nil
	link  *memLink
	gen   uint64
	frame []byte
}

type memEndpoint struct {
	nw        *MemNetwork
	self      Peer
	lim       Limits
	inbound   chan Inbound
	done      chan struct{}
	wake      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once

	// guarded by nw.mu
	queue  []memItem
	closed bool
	// servers: the servers it talks to, by id, with their addresses (nil:
	// every server, until SetServers).
	servers map[wire.ServerID]string
}

func peerLess(a, b Peer) int {
	switch {
	case a.IsClient != b.IsClient:
		if !a.IsClient {
			return -1
		}
		return 1
	case a.IsClient:
		return bytes.Compare(a.Client[:], b.Client[:])
	default:
		return int(a.Server) - int(b.Server)
	}
}

func (nw *MemNetwork) attach(p Peer) Transport {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if _, ok := nw.eps[p]; ok {
		panic(fmt.Sprintf("transport: %s is already on the memory network", p))
	}
	e := &memEndpoint{
		nw:      nw,
		self:    p,
		lim:     nw.lim,
		inbound: make(chan Inbound, nw.lim.InboundLen),
		done:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
	if !p.IsClient {
		nw.known[p.Server] = true
	}
	nw.eps[p] = e
	others := make([]Peer, 0, len(nw.eps))
	for q := range nw.eps {
		if q != p {
			others = append(others, q)
		}
	}
	slices.SortFunc(others, peerLess)
	for _, q := range others {
		if p.IsClient && q.IsClient {
			continue
		}
		nw.linkLocked(p, q)
		nw.linkLocked(q, p)
	}
	e.wg.Add(1)
	go e.pump()
	nw.refreshLocked()
	return e
}

func (nw *MemNetwork) linkLocked(from, to Peer) *memLink {
	k := [2]Peer{from, to}
	if l := nw.linkOf[k]; l != nil {
		return l
	}
	l := &memLink{from: from, to: to}
	nw.linkOf[k] = l
	nw.links = append(nw.links, l)
	return l
}

func (nw *MemNetwork) shouldBeUpLocked(l *memLink) bool {
	return nw.eps[l.from] != nil && nw.eps[l.to] != nil &&
		!(l.from.IsClient && l.to.IsClient) &&
		nw.talksToLocked(l.from, l.to) && nw.talksToLocked(l.to, l.from) &&
		!nw.cuts[[2]Peer{l.from, l.to}] && !nw.isolated[l.from] && !nw.isolated[l.to]
}

// talksToLocked reports whether live endpoint p talks to q: q is a client,
// or p names q among its servers (or has not named any).
func (nw *MemNetwork) talksToLocked(p, q Peer) bool {
	if q.IsClient {
		return true
	}
	e := nw.eps[p]
	if e == nil || e.servers == nil {
		return true
	}
	_, ok := e.servers[q.Server]
	return ok
}

func (nw *MemNetwork) refreshLocked() {
	for _, l := range nw.links {
		nw.setLinkLocked(l, nw.shouldBeUpLocked(l))
	}
}

// setLinkLocked moves l up or down, announcing it; going up flushes the
// frames held while it was down.
func (nw *MemNetwork) setLinkLocked(l *memLink, up bool) {
	if l.up == up {
		return
	}
	l.up = up
	l.gen++
	l.pending, l.pendingBytes = 0, 0
	target, about := l.eventTarget()
	if !up {
		nw.emitLocked(target, Inbound{Kind: EventDisconnected, From: about})
		return
	}
	in := Inbound{Kind: EventConnected, From: about}
	if !target.IsClient {
		in.Observes = nw.observes[about]
	}
	nw.emitLocked(target, in)
	dst := nw.eps[l.to]
	for i, f := range l.held {
		dst.enqueueLocked(memItem{link: l, gen: l.gen, frame: f})
		l.pending++
		l.pendingBytes += len(f)
		l.held[i] = nil
	}
	l.held, l.heldBytes = nil, 0
}

// bounceLocked drops l's connection (both directions of a client link) and
// lets it come back if nothing cuts it: the peer reconnects.
func (nw *MemNetwork) bounceLocked(l *memLink) {
	ls := []*memLink{l}
	if l.from.IsClient || l.to.IsClient {
		if r := nw.linkOf[[2]Peer{l.to, l.from}]; r != nil {
			ls = append(ls, r)
		}
	}
	for _, x := range ls {
		nw.setLinkLocked(x, false)
	}
	for _, x := range ls {
		nw.setLinkLocked(x, nw.shouldBeUpLocked(x))
	}
}

func (nw *MemNetwork) emitLocked(to Peer, in Inbound) {
	if e := nw.eps[to]; e != nil {
		e.enqueueLocked(memItem{ev: in})
	}
}

func (e *memEndpoint) enqueueLocked(it memItem) {
	e.queue = append(e.queue, it)
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Send implements Transport.
func (e *memEndpoint) Send(to Peer, msg *wire.Message) error {
	to = norm(to)
	nw := e.nw
	nw.mu.Lock()
	closed := e.closed
	tamper := nw.tamper
	known := to != e.self && !(to.IsClient && e.self.IsClient) && (to.IsClient || nw.known[to.Server])
	if !to.IsClient && e.servers != nil {
		_, known = e.servers[to.Server]
	}
	nw.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if !known {
		return fmt.Errorf("%w: %s", ErrUnknownPeer, to)
	}
	frame, err := encodeFrame(msg, e.lim.MaxFrame)
	if err != nil {
		return err
	}
	if tamper != nil {
		if frame = tamper(e.self, to, frame); frame == nil {
			return nil // dropped on the wire
		}
	}

	nw.mu.Lock()
	defer nw.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	l := nw.linkLocked(e.self, to)
	if !l.up {
		if to.IsClient {
			return fmt.Errorf("%w: %s", ErrNotConnected, to)
		}
		if len(l.held) >= e.lim.QueueLen || (len(l.held) > 0 && l.heldBytes+len(frame) > e.lim.QueueBytes) {
			return ErrQueueFull
		}
		l.held = append(l.held, frame)
		l.heldBytes += len(frame)
		return nil
	}
	if l.pending >= e.lim.QueueLen || (l.pending > 0 && l.pendingBytes+len(frame) > e.lim.QueueBytes) {
		if to.IsClient {
			nw.bounceLocked(l) // a slow client is disconnected, never waited for
		}
		return ErrQueueFull
	}
	nw.eps[to].enqueueLocked(memItem{link: l, gen: l.gen, frame: frame})
	l.pending++
	l.pendingBytes += len(frame)
	return nil
}

var _ Reconfigurable = (*memEndpoint)(nil)

// SetServers implements Reconfigurable.
func (e *memEndpoint) SetServers(addrs map[wire.ServerID]string) {
	nw := e.nw
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if e.closed {
		return
	}
	next := make(map[wire.ServerID]string, len(addrs))
	for id, a := range addrs {
		if a != "" && ServerPeer(id) != e.self {
			next[id] = a
		}
	}
	old := e.servers
	e.servers = next
	for _, l := range nw.links {
		if l.from != e.self || l.to.IsClient {
			continue
		}
		a, ok := next[l.to.Server]
		if was, known := old[l.to.Server]; ok && (!known || was == a) {
			continue // unchanged (or named for the first time): untouched
		}
		l.held, l.heldBytes = nil, 0 // let go, or moved: its queue goes
		if ok {
			nw.bounceLocked(l) // moved: dialed anew
		}
	}
	nw.refreshLocked()
}

// Inbound implements Transport.
func (e *memEndpoint) Inbound() <-chan Inbound { return e.inbound }

// Close implements Transport. Peers see the links to e go down.
func (e *memEndpoint) Close() error {
	e.closeOnce.Do(func() {
		nw := e.nw
		nw.mu.Lock()
		e.closed = true
		if nw.eps[e.self] == e {
			delete(nw.eps, e.self)
		}
		e.queue = nil
		for _, l := range nw.links {
			if l.from == e.self {
				l.held, l.heldBytes = nil, 0
			}
		}
		nw.refreshLocked()
		nw.mu.Unlock()
		close(e.done)
		e.wg.Wait()
		close(e.inbound)
	})
	return nil
}

// pump delivers e's queue to Inbound, decoding each frame as it goes.
func (e *memEndpoint) pump() {
	defer e.wg.Done()
	nw := e.nw
	for {
		nw.mu.Lock()
		if len(e.queue) == 0 {
			nw.mu.Unlock()
			select {
			case <-e.wake:
				continue
			case <-e.done:
				return
			}
		}
		it := e.queue[0]
		e.queue[0] = memItem{}
		e.queue = e.queue[1:]
		if it.link != nil {
			if it.gen != it.link.gen {
				nw.mu.Unlock()
				continue // its link dropped: lost in flight
			}
			it.link.pending--
			it.link.pendingBytes -= len(it.frame)
		}
		nw.mu.Unlock()

		in := it.ev
		if it.link != nil {
			from := it.link.from
			m, err := decodeFrame(it.frame, e.lim.MaxFrame)
			if errors.Is(err, wire.ErrUnknownKind) {
				continue // a newer minor version's message: skipped, as over QUIC
			}
			if err != nil {
				if !e.deliver(Inbound{Kind: EventBadInput, From: from, Err: badInput(from, err, it.frame)}) {
					return
				}
				nw.mu.Lock()
				if it.gen == it.link.gen {
					nw.bounceLocked(it.link)
				}
				nw.mu.Unlock()
				continue
			}
			in = Inbound{Kind: EventMessage, From: from, Msg: m, Size: len(it.frame)}
		}
		if !e.deliver(in) {
			return
		}
	}
}

func (e *memEndpoint) deliver(in Inbound) bool {
	select {
	case e.inbound <- in:
		return true
	case <-e.done:
		return false
	}
}
