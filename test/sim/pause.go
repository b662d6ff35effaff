package sim

import (
	"time"

	"github.com/bq-lock/bq/wire"
)

// Process pauses: a node that stops running for a while (a GC pause, a VM
// frozen by its host, SIGSTOP) and then goes on as if nothing happened. Its
// clock keeps going (it is the machine's), its links stay up, the disk
// finishes what it was given; but the process neither receives, sends nor
// ticks. Messages sent to it wait in its socket and are delivered, in order,
// the instant it resumes — before any of its timers fire, which is the order
// that hurts: a client must not act on what it hears without checking, at
// that instant, that its lease guarantee still holds (docs/protocol.md §3.3, §5).
//
// For the mutual-exclusion checker a client's holding ends when its lease
// guarantee lapses, if the lapse falls inside a pause — reckoned with every
// ack and suspicion that reached it meanwhile: after it the client may still
// believe it holds, and only the fencing token protects the resource (§7).
// What a client does after it resumes is checked as it happens: it must have
// reported the loss before it acts again.

// pause is one node's pause in progress.
// INVARIANT: inbox holds, in arrival order, every message delivered to the
// node since the pause began, and every change of its connections (a link
// that went down or came up): a process that resumes learns of them in the
// order they happened, as a real one reads its sockets.
type pause struct {
	start time.Duration
	until time.Duration
	inbox []queued
	// lapse (clients): when the lease guarantee lapses if no ack arrives,
	// computed when the pause began (never if it did not hold then); a
	// client that dies in the pause ends its holdings there.
	lapse time.Duration
}

type queued struct {
	from, to int
	data     []byte
	ep       uint64
	as       wire.ClientID
	// event, if set, is a connection change to run in place of a message.
	event func()
}

// deliverQueued hands a queued message (or connection change) to its node.
func (w *World) deliverQueued(m queued) {
	if m.event != nil {
		m.event()
		return
	}
	w.deliver(m.from, m.to, m.data, m.ep, m.as)
}

// inOrder runs fn, a connection change at node, now; or, if node is paused,
// in its inbox after the messages that reached it before the change.
func (w *World) inOrder(node int, fn func()) {
	if p := w.paused[node]; p != nil {
		p.inbox = append(p.inbox, queued{event: fn})
		return
	}
	fn()
}

// frozen reports whether node is paused now.
func (w *World) frozen(node int) bool {
	p := w.paused[node]
	return p != nil && w.now < p.until
}

// whenThawed runs fn now, or when node's pause ends (after its inbox).
func (w *World) whenThawed(node int, fn func()) {
	if p := w.paused[node]; p != nil {
		w.At(p.until, func() { w.whenThawed(node, fn) })
		return
	}
	fn()
}

// freeze pauses node for d (a pause already under way is extended).
func (w *World) freeze(node int, d time.Duration) {
	if !w.nodeUp(node) {
		return
	}
	until := w.now + d
	if p := w.paused[node]; p != nil {
		if until > p.until {
			p.until = until
			w.At(until, func() { w.thaw(node, until) })
		}
		return
	}
	p := &pause{start: w.now, until: until, lapse: never.At}
	if !w.isServer(node) {
		if cl := w.cli[node-w.slots]; cl.c.LeaseHolds(w.Now()) {
			p.lapse = w.lapseOf(cl)
		}
	}
	w.paused[node] = p
	w.stats.Pauses++
	w.trace("%s pauses for %.3fs (lease lapses at %s unless acks in flight arrive)", w.nodeName(node), d.Seconds(), lapseString(p.lapse))
	w.At(until, func() { w.thaw(node, until) })
}

func lapseString(t time.Duration) string {
	if t == never.At {
		return "-"
	}
	return Instant{At: t}.String()
}

// lapseOf is when cl's lease guarantee lapses if no more acks arrive.
func (w *World) lapseOf(cl *simClient) time.Duration {
	lapse := w.now
	for lapse < w.now+w.sc.TTL && cl.c.LeaseHolds(epoch0.Add(lapse)) {
		lapse += time.Millisecond
	}
	return lapse
}

// thaw ends node's pause if it is due at until: the inbox first, in order,
// then (clients) a tick at once and the check that the client reported every
// holding whose lease lapsed during the pause.
func (w *World) thaw(node int, until time.Duration) {
	p := w.paused[node]
	if p == nil || p.until != until {
		return // extended, or already over
	}
	delete(w.paused, node)
	if !w.nodeUp(node) {
		return
	}
	w.trace("%s resumes; %d messages waited", w.nodeName(node), len(p.inbox))
	if w.isServer(node) {
		for _, m := range p.inbox {
			w.deliverQueued(m)
		}
		return
	}
	c := node - w.slots
	cl := w.cli[c]
	var open []int // holdings open when the pause began
	for i, hd := range w.h.holds {
		if hd.Client == c && hd.To == never && hd.From.At <= p.start {
			open = append(open, i)
		}
	}
	for _, m := range p.inbox {
		w.deliverQueued(m)
	}
	if !cl.alive || len(open) == 0 {
		return
	}
	// With every ack and suspicion that reached it during the pause, the
	// client's guarantee lapsed at lapse; no certificate could form before
	// (docs/protocol.md §5), so a holding of the pause ends there at the latest.
	lapse := max(cl.c.LeaseValidUntil().Sub(epoch0), p.start)
	if lapse >= w.now {
		return // acks of heartbeats sent before the pause cover it all
	}
	var capped []string
	for _, i := range open {
		if hd := &w.h.holds[i]; hd.To == never || lapse < hd.To.At {
			hd.To = Instant{At: lapse}
			capped = append(capped, hd.Lock)
		}
	}
	w.clientEffects(c, cl.c.Tick(w.Now()))
	for _, lock := range capped {
		if cl.drv.holding[lock] {
			w.h.violate(CheckMutex, w.instant(), "c%d still holds %s after resuming at %s, though its lease guarantee lapsed at %s during the pause",
				c, lock, w.instant(), Instant{At: lapse})
		}
	}
}

// queueIfFrozen keeps a message for a paused node and reports whether it did.
func (w *World) queueIfFrozen(from, to int, data []byte, ep uint64, as wire.ClientID) bool {
	p := w.paused[to]
	if p == nil {
		return false
	}
	p.inbox = append(p.inbox, queued{from: from, to: to, data: data, ep: ep, as: as})
	return true
}

// armPause makes client c pause for d the moment its next listener report
// (an Update) arrives, before it acts on it: received, not yet processed —
// the report that lets a waiter in is one of these.
func (w *World) armPause(c int, d time.Duration) {
	w.armed[w.clientNode(c)] = d
	w.trace("c%d will pause for %.3fs when its next report arrives", c, d.Seconds())
}
