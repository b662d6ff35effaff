package sim

import (
	"errors"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/wire"
)

// Clients in the world: ticks, steps through the bakery, and the events the
// checkers record.

func (w *World) clientTick(c int) {
	cl := w.cli[c]
	if !cl.alive {
		return
	}
	if node := w.clientNode(c); w.frozen(node) {
		w.whenThawed(node, func() { w.clientTick(c) })
		return
	}
	w.clientEffects(c, cl.c.Tick(w.Now()))
	w.after(w.between(w.sc.TickMin, w.sc.TickMax), func() { w.clientTick(c) })
}

// clientEffects sends what a client step asks and records its events.
func (w *World) clientEffects(c int, e bakery.Effects) {
	cl := w.cli[c]
	if !cl.alive {
		return
	}
	w.followMove(c)
	for _, s := range e.Send {
		w.observeClientSend(c, s.Msg)
		data, err := wire.Encode(s.Msg)
		if err != nil {
			w.h.violate(CheckCrash, w.instant(), "c%d cannot encode %s: %v", c, s.Msg, err)
			continue
		}
		w.send(w.clientNode(c), int(s.To), data)
	}
	for _, ev := range e.Events {
		w.clientEvent(c, ev)
	}
}

func (w *World) observeClientSend(c int, m *wire.Message) {
	cl := w.cli[c]
	switch {
	case m.SessionOpen != nil || m.Heartbeat != nil:
		cl.lastHB = w.now
	case m.Submit != nil:
		st := decodeStatement(m.Submit.Statement)
		if st == nil {
			return
		}
		at := w.instant()
		w.h.wrote(at, c, st, false)
		if st.Phase == wire.PhaseExit {
			if _, ok := w.exits[opKey{c, m.Submit.Req}]; !ok {
				w.exits[opKey{c, m.Submit.Req}] = &exitTrack{st: st, acks: make(map[int]bool)}
			}
		}
		if st.Phase == wire.PhaseTicket {
			// The Ticket is sent the moment GET-TICKET completes.
			d := *st
			d.Phase, d.N, d.JHash = wire.PhaseDoorway, 0, nil
			w.h.wrote(at, c, &d, true)
		}
	case m.Listen != nil && len(m.Listen.Members) > 0:
		// LISTEN, the third access (a resend after a reconnect of an
		// attempt that was alone carries no members and is no access).
		if a := w.h.attempt(c, m.Listen.Lock, m.Listen.Attempt); a != nil {
			a.listenSent = true
		}
	}
}

func (w *World) clientEvent(c int, ev bakery.Event) {
	cl := w.cli[c]
	at := w.trace("c%d event %s", c, ev)
	switch ev.Kind {
	case bakery.Ticketed:
		if a := w.h.attempt(c, ev.Lock, ev.Attempt); a != nil {
			a.ticketed = &at
		}
		w.noteDone(at, c, ev, wire.PhaseTicket)
	case bakery.Acquired:
		w.stats.Acquired++
		if !cl.c.LeaseHolds(w.Now()) {
			w.h.violate(CheckMutex, at, "c%d entered %s (att=%d) while its lease guarantee does not hold", c, ev.Lock, ev.Attempt)
		}
		a := w.h.attempt(c, ev.Lock, ev.Attempt)
		if a != nil {
			a.acquired = &at
		}
		if hd := w.h.openHold(c, ev.Lock); hd != nil {
			w.h.violate(CheckMutex, at, "c%d acquired %s again while its own holding att=%d is open", c, ev.Lock, hd.Attempt)
		}
		hold := Hold{Lock: ev.Lock, Client: c, Attempt: ev.Attempt, Token: ev.Token, From: at, To: never}
		if a != nil {
			hold.Mode = a.mode
		}
		switch hold.Mode.Mode {
		case wire.ModeShared:
			w.stats.SharedAcquired++
		case wire.ModePermits:
			w.stats.PermitsAcquired++
		}
		for _, other := range w.h.holds {
			if other.Lock == ev.Lock && other.To == never {
				w.stats.Together++
				break
			}
		}
		w.h.holds = append(w.h.holds, hold)
		acc := cl.c.Accesses(ev.Lock)
		want := 2
		if a != nil && a.listenSent {
			want = 3
			w.stats.Accesses3++
		} else {
			w.stats.Accesses2++
		}
		if acc != want {
			w.h.violate(CheckAccesses, at, "c%d acquired %s (att=%d) after %d quorum accesses, want %d (listen sent: %t)", c, ev.Lock, ev.Attempt, acc, want, want == 3)
		}
		if ev.Token.Client != cl.c.ID() {
			w.h.violate(CheckFencing, at, "c%d acquired %s with a token of %s", c, ev.Lock, ev.Token.Client)
		}
		if w.sc.Elect {
			w.proclaim(c, ev)
		}
	case bakery.Lost:
		w.stats.Lost++
		if a := w.h.attempt(c, ev.Lock, ev.Attempt); a != nil {
			a.lost = true
		}
		w.h.endHold(at, c, ev.Lock)
	case bakery.Failed:
		w.stats.Failed++
		if errors.Is(ev.Err, bakery.ErrTicketCap) {
			w.h.violate(CheckInflation, at, "c%d's attempt on %s failed on the ticket cap: %v", c, ev.Lock, ev.Err)
		}
		if a := w.h.attempt(c, ev.Lock, ev.Attempt); a != nil && a.failed == nil && a.acquired == nil {
			a.failed = &at
		}
		// (An Exit's completion is taken from the wire, noteExitAck: a lost
		// lease ends attempts at once and sends their Exits best effort.)
	case bakery.ReadDone:
		if r := w.h.reads[opKey{c, ev.Op}]; r != nil {
			r.done, r.end, r.result = true, at, ev.Statement
		}
	case bakery.SetDone:
		if s := w.h.sets[opKey{c, ev.Op}]; s != nil {
			s.done, s.end, s.set = true, at, ev.Set
		}
	}
	cl.drv.onEvent(ev)
	if w.OnClientEvent != nil {
		w.OnClientEvent(c, ev)
	}
}

// noteDone records that c's statement of phase for the event's attempt
// reached q servers (a Ticket: Ticketed).
func (w *World) noteDone(at Instant, c int, ev bakery.Event, phase wire.Phase) {
	for _, wr := range w.h.writes[regKey{ev.Lock, c}] {
		if !wr.done && wr.ts.Attempt == ev.Attempt && wr.ts.Phase == phase {
			w.h.wrote(at, c, &wire.Statement{Lock: ev.Lock, Session: wr.ts.Session, Attempt: ev.Attempt, Phase: phase}, true)
			return
		}
	}
}
