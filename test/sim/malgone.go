package sim

import (
	"time"

	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// caught-or-harmless (§6, docs/fault-model.md): a malicious client stopped
// at the quiet period is out of every correct server's active sets within
// 2.5×TTL — reset, exited or banned — counted from the later of the quiet
// period and the moment that server first held the statement. A faulty
// server can hand a correct one a silent client's statement late (seed
// 8002273: a Doorway held back 3.7 s past the quiet period); what must be
// bounded is the correct servers' reaction to what they hold, and what a
// late statement can cost the waiters is bounded apart, by probation
// (change 33) and the drip checker below.

// heldKey names one correct server's register of one client on one lock.
type heldKey struct {
	server int
	lock   string
	client wire.ClientID
}

// heldAt is the statement a server holds there and since when (sampled).
type heldAt struct {
	ts quorum.Timestamp
	at time.Duration
}

// caughtWithin is how long after the quiet period (or after a correct
// server first held it) a silent malicious client's statement may stay.
func (w *World) caughtWithin() time.Duration { return 2*w.sc.TTL + w.sc.TTL/2 }

// watched are the clients whose registers sampleHeld follows: the
// malicious clients and the faulty servers' colluders.
func (w *World) watched() []wire.ClientID {
	var out []wire.ClientID
	for _, m := range w.mal {
		out = append(out, m.id)
	}
	for _, s := range w.srv {
		if s.byz != nil && s.byz.Collude != nil {
			out = append(out, wire.ClientID(s.byz.Collude.Public.ID))
		}
	}
	return out
}

// sampleHeld notes, every 100 ms, since when each correct server holds each
// watched client's present statement on each lock, and for how long after
// the quiet period each one held some colluder's statement.
func (w *World) sampleHeld() {
	ids := w.watched()
	colluders := make(map[wire.ClientID]bool)
	for _, s := range w.srv {
		if s.byz != nil && s.byz.Collude != nil {
			colluders[wire.ClientID(s.byz.Collude.Public.ID)] = true
		}
	}
	for i, s := range w.srv {
		if s.byz != nil || !s.up {
			continue
		}
		// A removed member holds its frozen state for good, and a copy
		// restarts every clock of a member of the new epoch (change 43):
		// only a member of the newest epoch serving it counts, from then.
		counts := w.member(i) && (w.chain == nil || w.servesNewest(i) && w.now > w.activeFrom(i))
		stalled := false
		for _, id := range ids {
			for _, lock := range w.sc.Locks {
				k := heldKey{i, lock, id}
				st := s.core.Register(lock, id)
				if st == nil || st.Phase == wire.PhaseExit {
					delete(w.heldSince, k)
					continue
				}
				stalled = stalled || colluders[id]
				ts := quorum.TimestampOf(st)
				if h, ok := w.heldSince[k]; !ok || h.ts != ts {
					w.heldSince[k] = heldAt{ts: ts, at: w.now}
				}
			}
		}
		if stalled && w.now > w.quiet && counts {
			w.colluderHeld[i] += 100 * time.Millisecond
		}
	}
}

// heldFrom is since when correct server i holds st of client id on lock: as
// sampled, or now for a statement that arrived since the last sample.
func (w *World) heldFrom(i int, lock string, id wire.ClientID, st *wire.Statement) time.Duration {
	if h, ok := w.heldSince[heldKey{i, lock, id}]; ok && h.ts == quorum.TimestampOf(st) {
		return h.at
	}
	return w.now
}

// checkMalGone: a malicious client that stopped at the quiet period is, by
// its deadline, out of every correct server's active sets (reset, exited or
// banned); a statement a correct server came to hold late gets its own
// deadline, and the check runs again then. Once nothing is pending, a ban
// must be unanimous: evidence is transferable (docs/protocol.md §6), so if
// one correct server banned it, every correct server has. With membership
// changes (reconfig.go), over the correct members of the newest epoch (a
// removed member is told of no later evidence and runs out no lease), each
// counted from its copy's end at the earliest; one still copying is
// checked again later.
func (w *World) checkMalGone(m *malClient) {
	at := w.trace("check: is malicious %s (%s) out of every active set?", m.name(), m.kind)
	banned, upCorrect := 0, 0
	var again time.Duration
	for i, s := range w.srv {
		if s.byz != nil || !s.up || !w.member(i) {
			continue
		}
		if w.chain != nil && !w.servesNewest(i) {
			again = max(again, w.now+pushRetry)
			continue
		}
		upCorrect++
		if s.core.Banned(m.id) {
			banned++
			continue
		}
		for _, lock := range w.sc.Locks {
			st := s.core.Register(lock, m.id)
			if st == nil || st.Phase == wire.PhaseExit {
				continue
			}
			since := max(w.quiet, w.heldFrom(i, lock, m.id, st), w.activeFrom(i))
			if due := since + w.caughtWithin(); due > w.now {
				w.trace("check: s%d has held %s only since %.3fs: again at %.3fs", i, st, since.Seconds(), due.Seconds())
				again = max(again, due)
				continue
			}
			w.h.violate(CheckCaught, at, "malicious %s (%s) stopped at %.3fs but s%d still holds its %s on %s (since %.3fs), neither reset nor banned",
				m.name(), m.kind, w.quiet.Seconds(), i, st, lock, since.Seconds())
		}
	}
	if again > 0 {
		w.silentDeadlines = append(w.silentDeadlines, again)
		w.At(again, func() { w.checkMalGone(m) })
		return
	}
	if banned > 0 && banned < upCorrect {
		w.h.violate(CheckCaught, at, "malicious %s (%s) is banned at %d of %d correct servers: the evidence did not spread", m.name(), m.kind, banned, upCorrect)
	}
	w.malBanned[m.idx] = banned > 0 && banned == upCorrect
}

// dripWithin is how long, from the quiet period on, a correct server may
// hold statements of a faulty server's colluder (drip-bounded, change 33):
// the lease of the session it holds then and its certificate, and that of
// one more it took before that certificate reached it — two default TTLs
// and a TTL for each certificate's delivery. Without probation a drip-feed
// keeps it held to the end of the run.
func (w *World) dripWithin() time.Duration {
	return 2*w.srv[0].cfg.DefaultTTL + 2*w.sc.TTL
}

// dripWatch is how long after the quiet period a run with a drip-feed
// server lasts at least, so that a drip probation did not stop shows.
func (w *World) dripWatch() time.Duration { return 2 * w.dripWithin() }

// checkDrip: no correct server held a colluder's statements for longer than
// dripWithin after the quiet period (sampled every 100 ms).
func (w *World) checkDrip() {
	for i := range w.srv {
		if d := w.colluderHeld[i]; d > w.dripWithin() {
			w.h.violate(CheckDrip, w.instant(), "s%d held a colluding client's statements for %.1fs after the quiet period (at most %.1fs): a drip-feed was not stopped",
				i, d.Seconds(), w.dripWithin().Seconds())
		}
	}
}
