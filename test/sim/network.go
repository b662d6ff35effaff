package sim

import (
	"fmt"
	"time"

	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// The simulated network: FIFO channels per (sender, receiver), delays, cuts
// and their healing, and the delivery of encoded messages.

func (w *World) delay() time.Duration {
	if w.rng.Float64() < w.sc.LongDelayProb {
		return w.between(w.sc.MaxDelay, w.sc.LongDelay)
	}
	return w.between(w.sc.MinDelay, w.sc.MaxDelay)
}

// send puts data on the channel from → to: FIFO per channel, dropped if the
// link is cut now or is cut before delivery.
func (w *World) send(from, to int, data []byte) { w.sendAs(from, to, data, wire.ClientID{}) }

// sendAs is send for a malicious client's node that speaks as identity as
// (a sybil); the zero ClientID means the node's own identity.
func (w *World) sendAs(from, to int, data []byte, as wire.ClientID) {
	w.sendLate(from, to, data, as, 0)
}

// sendLate is sendAs with extra delay (a slow faulty server).
func (w *World) sendLate(from, to int, data []byte, as wire.ClientID, extra time.Duration) {
	if w.frozen(from) {
		// A paused process sends nothing; what it had decided to send (a
		// commit finishing under it) leaves when it resumes.
		w.whenThawed(from, func() { w.sendLate(from, to, data, as, extra) })
		return
	}
	w.stats.Messages++
	if to < 0 || to >= len(w.cut) {
		// A server no run has: a member of an epoch a faulty server forged,
		// which a node that adopted it would talk to (change 64).
		w.stats.Dropped++
		return
	}
	if !w.reachable(from, to) {
		w.stats.Dropped++
		return
	}
	if end := w.lagUntil(from, to); end > w.now {
		extra = max(extra, end-w.now)
	}
	at := max(w.now+w.delay()+extra, w.last[from][to])
	w.last[from][to] = at
	ep := w.epoch[from][to]
	w.At(at, func() { w.deliver(from, to, data, ep, as) })
}

func (w *World) deliver(from, to int, data []byte, ep uint64, as wire.ClientID) {
	if ep != w.epoch[from][to] || !w.reachable(from, to) {
		w.stats.Dropped++
		return
	}
	if d, ok := w.armed[to]; ok {
		if m, err := wire.Decode(data); err == nil && m.Update != nil {
			delete(w.armed, to)
			w.freeze(to, d)
		}
	}
	if w.queueIfFrozen(from, to, data, ep, as) {
		return
	}
	m, err := wire.Decode(data)
	if err != nil {
		w.stats.BadInput++
		if w.isServer(from) && w.srv[from].byz != nil {
			w.trace("%s->%s bad input dropped: %v", w.nodeName(from), w.nodeName(to), err)
			return
		}
		w.h.violate(CheckCrash, w.instant(), "%s->%s: an honest message does not decode: %v", w.nodeName(from), w.nodeName(to), err)
		return
	}
	w.trace("%s->%s %s", w.nodeName(from), w.nodeName(to), w.describe(m))
	if w.isServer(to) {
		peer := w.peerOf(from)
		if as != (wire.ClientID{}) {
			peer = wire.ClientPeer(as)
		}
		w.serverStep(to, core.Input{Kind: core.InputMessage, From: peer, Msg: m})
		return
	}
	if mc := w.malOf(to); mc != nil {
		mc.receive(from, m)
		return
	}
	c := to - w.slots
	if w.electionAnswer(c, from, m) {
		return
	}
	if m.Ack != nil {
		w.noteExitAck(c, from, m.Ack.Req)
	}
	w.clientEffects(c, w.cli[c].c.Step(w.Now(), wire.ServerID(from), m))
}

// exitTrack follows one Exit a client sent: it is complete once q distinct
// servers acknowledged it (whatever the client then reports).
type exitTrack struct {
	st   *wire.Statement
	acks map[int]bool
	done bool
}

func (w *World) noteExitAck(c, server int, req uint64) {
	x := w.exits[opKey{c, req}]
	if x == nil || x.done {
		return
	}
	x.acks[server] = true
	if w.ackQuorum(x.acks) { // q of one epoch's members (change 43)
		x.done = true
		w.h.wrote(w.trace("c%d's %s reached q servers", c, x.st), c, x.st, true)
	}
}

// describe renders a message on one line, with what the messages' own
// String() leaves out: the statement a Submit or Forward carries, and who
// an Update or MembersReply names, in what phase (c3:Ticket/7 = client c3's
// Ticket with N=7; -c3 = absent).
func (w *World) describe(m *wire.Message) string {
	s := m.String()
	var ss *wire.SignedStatement
	var list []wire.SignedStatement
	var absent []wire.ClientID
	switch {
	case m.Submit != nil:
		ss = &m.Submit.Statement
	case m.Forward != nil:
		ss = &m.Forward.Statement
	case m.Update != nil:
		list, absent = m.Update.Statements, m.Update.Absent
	case m.MembersReply != nil:
		list = m.MembersReply.Members
	}
	if ss != nil {
		if st := decodeStatement(*ss); st != nil {
			s += " " + st.String()
		}
	}
	if len(list)+len(absent) > 0 {
		s += " ["
		for i, x := range list {
			if i > 0 {
				s += " "
			}
			if st := decodeStatement(x); st != nil {
				s += fmt.Sprintf("%s:%s/%d", w.clientName(st.Client), st.Phase, st.N)
			}
		}
		for _, c := range absent {
			s += " -" + w.clientName(c)
		}
		s += "]"
	}
	return s
}

func (w *World) clientName(id wire.ClientID) string {
	if c, ok := w.byID[id]; ok {
		return fmt.Sprintf("c%d", c)
	}
	if m, ok := w.malByID[id]; ok {
		return w.mal[m].name()
	}
	return id.String()
}

// cutLink and healLink count overlapping cuts of the link a–b.
func (w *World) cutLink(a, b int) {
	if w.cut[a][b] == 0 && w.nodeUp(a) && w.nodeUp(b) {
		w.linkDown(a, b)
	}
	w.cut[a][b]++
	w.cut[b][a]++
	w.epoch[a][b]++
	w.epoch[b][a]++
}

func (w *World) healLink(a, b int) {
	w.cut[a][b]--
	w.cut[b][a]--
	if w.cut[a][b] == 0 && w.nodeUp(a) && w.nodeUp(b) {
		w.linkUp(a, b)
	}
}

// linkDown tells the servers at either end that the channel went down.
func (w *World) linkDown(a, b int) {
	for _, p := range [][2]int{{a, b}, {b, a}} {
		if w.isServer(p[0]) && w.srv[p[0]].up {
			w.serverStep(p[0], core.Input{Kind: core.InputDisconnected, From: w.peerOf(p[1])})
		}
	}
}

// linkUp tells both ends that the channel is up again, as the real transport
// does with EventConnected: servers get InputConnected, clients Reconnected.
func (w *World) linkUp(a, b int) {
	w.trace("link %s–%s up", w.nodeName(a), w.nodeName(b))
	for _, p := range [][2]int{{a, b}, {b, a}} {
		if w.isServer(p[0]) {
			w.serverStep(p[0], core.Input{Kind: core.InputConnected, From: w.peerOf(p[1]), Admission: w.grantFor(p[1])})
		} else if c := p[0] - w.slots; w.malOf(p[0]) == nil && w.dials(c, p[1]) {
			s := wire.ServerID(p[1])
			w.inOrder(p[0], func() {
				w.clientEffects(c, w.cli[c].c.Reconnected(w.Now(), s))
				w.showProclamations(c, p[1]) // the SDK's resend on a new connection
			})
		}
	}
}

func (w *World) peerOf(node int) wire.Peer {
	if w.isServer(node) {
		return wire.ServerPeer(wire.ServerID(node))
	}
	if m := w.malOf(node); m != nil {
		return wire.ClientPeer(m.id)
	}
	return wire.ClientPeer(w.cli[node-w.slots].c.ID())
}

func (w *World) bumpEpochs(node int) {
	for o := range w.epoch {
		w.epoch[node][o]++
		w.epoch[o][node]++
	}
}
