package sim

import (
	"fmt"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// What the workload calls on a client (Lock, Unlock, Abandon, Read, GetSet),
// and what a test may ask of the world.

// Lock calls Lock on client c.
func (w *World) Lock(c int, lock string, try bool) error {
	cl := w.cli[c]
	if !cl.alive {
		return fmt.Errorf("sim: c%d is silent", c)
	}
	mode := w.modeFor(lock)
	e, err := cl.c.LockAs(w.Now(), lock, mode, try)
	if err != nil {
		return err
	}
	w.stats.Locks++
	var as string
	if mode.Mode != wire.ModeExclusive {
		as = " " + mode.String()
	}
	at := w.trace("c%d calls Lock(%s try=%t%s) att=%d", c, lock, try, as, cl.c.Attempt(lock))
	w.h.lockCalled(at, c, lock, cl.c.Attempt(lock), try, mode)
	w.clientEffects(c, e)
	return nil
}

// modeFor is the mode of a Lock call on lock (change 60): exclusive on a
// plain lock, shared two times in three on a readers–writer lock, one of
// its permits on a semaphore.
func (w *World) modeFor(lock string) wire.Holding {
	switch k := w.sc.kindOf(lock); {
	case k.Permits >= 2:
		return wire.Holding{Mode: wire.ModePermits, Permits: uint32(k.Permits)}
	case k.Shared && w.modeRng.IntN(3) != 0:
		return wire.Holding{Mode: wire.ModeShared}
	}
	return wire.Holding{}
}

// Unlock calls Unlock on client c; the holding ends now.
func (w *World) Unlock(c int, lock string) error {
	cl := w.cli[c]
	before, exits := cl.c.Accesses(lock), cl.c.Stats.Accesses["exit"]
	e, err := cl.c.Unlock(w.Now(), lock)
	if err != nil {
		return err
	}
	at := w.trace("c%d calls Unlock(%s)", c, lock)
	w.h.endHold(at, c, lock)
	if d, dx := cl.c.Accesses(lock)-before, cl.c.Stats.Accesses["exit"]-exits; d != 1 || dx != 1 {
		w.h.violate(CheckAccesses, at, "c%d's Unlock(%s) made %d quorum accesses (%d exit), want 1", c, lock, d, dx)
	}
	w.clientEffects(c, e)
	return nil
}

// Abandon calls Abandon on client c; a holding ends now.
func (w *World) Abandon(c int, lock string) {
	cl := w.cli[c]
	at := w.trace("c%d calls Abandon(%s)", c, lock)
	w.h.endHold(at, c, lock)
	w.clientEffects(c, cl.c.Abandon(w.Now(), lock))
}

// Read starts a register read by client c of client x's register on lock.
func (w *World) Read(c int, lock string, x int) {
	cl := w.cli[c]
	op, e := cl.c.Read(lock, w.cli[x].c.ID())
	w.stats.Reads++
	at := w.trace("c%d calls Read(%s c%d) op=%d", c, lock, x, op)
	r := &readRec{client: c, x: x, lock: lock, start: at}
	w.h.reads[opKey{c, op}] = r
	w.h.readList = append(w.h.readList, r)
	w.clientEffects(c, e)
}

// GetSet starts a getSet by client c on lock.
func (w *World) GetSet(c int, lock string) {
	cl := w.cli[c]
	op, e := cl.c.GetSet(lock)
	w.stats.Sets++
	at := w.trace("c%d calls GetSet(%s) op=%d", c, lock, op)
	s := &setRec{client: c, lock: lock, start: at}
	w.h.sets[opKey{c, op}] = s
	w.h.setList = append(w.h.setList, s)
	w.clientEffects(c, e)
}

// CrashClient silences client c now (for scripts).
func (w *World) CrashClient(c int) { w.crashClient(c) }

// Retire stops client c's application from starting anything more; the
// client itself (session, heartbeats, reconnects) lives on.
func (w *World) Retire(c int) { w.cli[c].drv.retired = true }

// Rehire lets client c's application start operations again, from now.
func (w *World) Rehire(c int) {
	d := w.cli[c].drv
	d.retired = false
	d.after(0, d.wake)
}

// Client returns client c's state machine (for scripts and tests; read only).
func (w *World) Client(c int) *bakery.Client { return w.cli[c].c }

// Core returns server i's core, or nil while it is down (read only).
func (w *World) Core(i int) *core.Core { return w.srv[i].core }

// Holds returns the holdings recorded so far.
func (w *World) Holds() []Hold { return append([]Hold(nil), w.h.holds...) }

// checkNoneFramed: no correct server ever bans a correct client (docs/protocol.md
// §6: the automaton moves to byz only on what no correct client can produce).
func (w *World) checkNoneFramed() {
	for i, s := range w.srv {
		if s.byz != nil || !s.up {
			continue
		}
		for _, c := range w.cli {
			if s.core.Banned(c.c.ID()) {
				w.h.violate(CheckFramed, w.instant(), "correct s%d banned correct client c%d", i, c.idx)
				return
			}
		}
	}
}

// checkColluders: no correct server holds a Ticket (or Held) of a faulty
// server's colluding client. The colluder never completes a GET-TICKET; its
// only Tickets are justified by Views of one server (self-justify) or by
// nothing (inflate), and §3.2 requires q Views from q distinct servers.
func (w *World) checkColluders() {
	w.checkNoneFramed()
	for _, z := range w.srv {
		if z.byz == nil || z.byz.Collude == nil {
			continue
		}
		colluder := wire.ClientID(z.byz.Collude.Public.ID)
		for i, s := range w.srv {
			if s.byz != nil || !s.up {
				continue
			}
			for _, lock := range w.sc.Locks {
				if st := s.core.Register(lock, colluder); st != nil && (st.Phase == wire.PhaseTicket || st.Phase == wire.PhaseHeld) {
					w.h.violate(CheckOneSigner, w.instant(), "correct s%d accepted %s of s%d's colluding client, whose J no q distinct servers signed", i, st, z.id)
					return
				}
			}
		}
	}
}

// checkMemory: what a correct server holds for any one client stays within
// the configured bounds (docs/protocol.md §6: attempts, locks, listeners,
// sessions per client).
func (w *World) checkMemory() {
	for i, s := range w.srv {
		if s.byz != nil || !s.up {
			continue
		}
		lim := s.core.Limits()
		if tracked, counted := s.core.StateBytes(); tracked != counted || tracked > lim.StateBytes {
			w.h.violate(CheckMemory, w.instant(), "s%d counts %d bytes of live state, holds %d, bound %d", i, tracked, counted, lim.StateBytes)
			return
		}
		for _, c := range s.core.KnownClients() {
			f := s.core.ClientFootprint(c)
			if f.Locks > lim.Locks || f.Subscriptions > lim.Subscriptions*f.Locks || f.MaxWatched > lim.MaxWatched ||
				f.Sessions > lim.Sessions || f.Deferred > lim.Deferred || f.PendingVotes > lim.PendingVotes {
				w.h.violate(CheckMemory, w.instant(), "s%d holds %+v for %s, beyond the bounds %+v", i, f, w.clientName(c), lim)
				return
			}
			if f.Locks > w.stats.MaxLocksPerClient {
				w.stats.MaxLocksPerClient = f.Locks
			}
		}
	}
}
