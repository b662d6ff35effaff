package sim

import (
	"time"

	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// Servers in the world: ticks, steps through the core, the commit pipeline
// and what they send.

func (w *World) serverTick(i int) {
	if w.frozen(i) {
		w.whenThawed(i, func() { w.serverTick(i) })
		return
	}
	s := w.srv[i]
	if s.up && s.byz != nil && s.byz.forget(w.Now()) {
		// amnesia: a crash that loses the disk too; back 200 ms later.
		w.trace("s%d loses its disk", i)
		w.crashServer(i)
		s.disk = newDisk()
		w.after(200*time.Millisecond, func() { w.restartServer(i) })
	}
	if s.up {
		e := s.core.Tick(w.Now())
		for _, peer := range s.repair.Due(w.Now()) {
			w.trace("s%d resynchronises with s%d after an overflow", i, peer)
			e.Append(s.core.Step(w.Now(), core.Input{Kind: core.InputConnected, From: wire.ServerPeer(peer)}))
		}
		var extra []core.Outgoing
		if s.byz != nil {
			extra = s.byz.tick(w.Now())
			w.stats.ByzantineSent += len(extra)
		}
		w.serverEffects(i, e, nil, extra, true)
	}
	w.after(w.between(w.sc.TickMin, w.sc.TickMax), func() { w.serverTick(i) })
}

func (w *World) serverStep(i int, in core.Input) {
	s := w.srv[i]
	if !s.up {
		return
	}
	if w.frozen(i) {
		// A connection change (a message is queued by deliver): in order
		// with the messages, which a crash drops along with it.
		w.inOrder(i, func() { w.serverStep(i, in) })
		return
	}
	if w.dropsNews(i, in) {
		w.trace("s%d stays in its epoch: the news dropped", i)
		return
	}
	if s.byz != nil && in.Msg != nil {
		s.byz.observe(in.From, in.Msg)
	}
	e := s.core.Step(w.Now(), in)
	var sub *wire.Submit
	if in.Msg != nil && in.From.IsClient {
		sub = in.Msg.Submit
	}
	w.serverEffects(i, e, sub, nil, false)
}

// serverEffects runs a step's effects through the server's commit pipeline
// (docs/protocol.md §9, docs/protocol.md change 12): records become durable after
// a commit delay, and only then go the batch's messages, except the ones that
// only report, which leave at once when nothing earlier waits for their peer.
func (w *World) serverEffects(i int, e core.Effects, sub *wire.Submit, extra []core.Outgoing, tick bool) {
	s := w.srv[i]
	w.observeResets(i)
	w.observeEpoch(i)
	w.followAdopted(i)
	records, early, late := s.order.Batch(e, tick)
	if sub != nil && s.byz == nil {
		w.noteAck(s, sub, core.Effects{Send: early})
	}
	w.emit(i, append(early, extra...))
	if len(records) == 0 && len(late) == 0 {
		return
	}
	var delay time.Duration
	if len(records) > 0 {
		delay = w.between(w.sc.CommitMin, w.sc.CommitMax)
	}
	done := max(w.now, s.diskFree) + delay
	s.diskFree = done
	gen := s.gen
	commit := func() {
		if s.gen != gen {
			return // crashed before this batch was durable: records and replies are gone
		}
		for _, r := range records {
			s.disk.apply(r)
		}
		if sub != nil && s.byz == nil {
			w.noteAck(s, sub, core.Effects{Send: late})
		}
		w.emit(i, late)
		s.order.Sent(late)
	}
	if done == w.now {
		commit()
		return
	}
	w.after(done-w.now, commit)
}

// emit sends a server's messages, through its Byzantine behaviour if any.
func (w *World) emit(i int, outs []core.Outgoing) {
	s := w.srv[i]
	if len(outs) == 0 {
		return
	}
	if s.byz != nil {
		outs = s.byz.rewrite(w.Now(), outs)
	}
	for _, o := range outs {
		data, err := wire.Encode(o.Msg)
		if err != nil {
			w.h.violate(CheckCrash, w.instant(), "s%d cannot encode %s: %v", i, o.Msg, err)
			continue
		}
		var extra time.Duration
		if s.byz != nil {
			data = s.byz.garble(o.To, data)
			extra = s.byz.delay(o.To)
		}
		to := -1
		if o.To.IsClient {
			if c, ok := w.byID[o.To.Client]; ok {
				to = w.clientNode(c)
			} else if m, ok := w.malByID[o.To.Client]; ok {
				to = w.mal[m].node()
			}
		} else if int(o.To.Server) < len(w.srv) {
			to = int(o.To.Server)
		}
		if to < 0 || to == i {
			continue
		}
		if !o.To.IsClient && w.now < w.overflowUntil[to] {
			w.trace("s%d->s%d overflows: %s dropped", i, to, w.describe(o.Msg))
			s.repair.Overflowed(o.To.Server, w.Now())
			continue
		}
		w.sendLate(i, to, data, wire.ClientID{}, extra)
	}
}

// noteAck records that a correct server acknowledged a client's statement:
// it must still hold it (or a newer one) after any crash.
func (w *World) noteAck(s *simServer, sub *wire.Submit, e core.Effects) {
	for _, o := range e.Send {
		if !o.To.IsClient {
			continue
		}
		m := o.Msg
		acked := (m.Ack != nil && m.Ack.Req == sub.Req) || (m.ViewReply != nil && m.ViewReply.Req == sub.Req) ||
			(m.MembersReply != nil && m.MembersReply.Req == sub.Req)
		if !acked {
			continue
		}
		st := decodeStatement(sub.Statement)
		c, ok := w.byID[o.To.Client]
		if st == nil || !ok || st.Client != o.To.Client {
			continue
		}
		k := regKey{st.Lock, c}
		ts := quorum.TimestampOf(st)
		if st.Phase == wire.PhaseExit {
			// An Exit is lazy too (change 29): its ack promises only what
			// was acked before it; the client resends it after a crash.
			// Noted, so that a restart that loses it tells the checkers.
			if s.exitAcks == nil {
				s.exitAcks = make(map[regKey]quorum.Timestamp)
			}
			if ts.Compare(s.exitAcks[k]) > 0 {
				s.exitAcks[k] = ts
			}
			return
		}
		if st.Phase == wire.PhaseHeld {
			// A Held is lazy (docs/protocol.md change 13): its ack promises
			// only the Ticket it follows.
			ts.Phase = wire.PhaseTicket
		}
		if ts.Compare(s.acks[k]) > 0 {
			s.acks[k] = ts
		}
		return
	}
}

// observeResets notes reset certificates a server has newly learned, and
// checks that none covers a live client's session while its lease holds
// (docs/protocol.md §5: the lease guarantee rules out a certificate).
func (w *World) observeResets(i int) {
	s := w.srv[i]
	if !s.up {
		return
	}
	for c, cl := range w.cli {
		up := s.core.ResetUpTo(cl.c.ID())
		if up <= s.reset[c] {
			continue
		}
		s.reset[c] = up
		at := w.trace("s%d knows c%d reset up to session %d", i, c, up)
		w.stats.ResetsKnown++
		if _, ok := w.resetKnown[[2]int{i, c}]; !ok {
			w.resetKnown[[2]int{i, c}] = w.now
		}
		w.h.certKnown(at, c, up)
		// Over the correct members of the newest epoch: a faulty server's
		// core is honest but may be fed what no correct one is, and a
		// removed member frozen in an old epoch takes a certificate of that
		// epoch made with keys that leaked once the later epochs were
		// served (leaked-keys, change 47) — its state counts for no one
		// who knows the newest epoch.
		if cl.alive && s.byz == nil && w.member(i) && cl.c.Session() <= up && cl.c.LeaseHolds(w.Now()) {
			w.h.violate(CheckReset, at, "a reset certificate on c%d session %d exists at s%d while c%d's lease guarantee holds", c, up, i, c)
		}
	}
}
