package sim

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// The fault schedule: partitions, crashes and restarts of servers and
// clients, silent clients.

func (w *World) faultLinks(f Fault) [][2]int {
	var out [][2]int
	switch f.Kind {
	case FaultIsolateServer:
		for o := range w.cut {
			if o != f.Server {
				out = append(out, [2]int{f.Server, o})
			}
		}
	case FaultIsolateClient:
		for _, s := range f.Servers {
			out = append(out, [2]int{s, w.clientNode(f.Client)})
		}
	case FaultSplitServers:
		// Every server slot: a member started during the split is on the
		// side Servers does not name.
		for a := range w.slots {
			for b := range w.slots {
				if contains(f.Servers, a) && !contains(f.Servers, b) {
					out = append(out, [2]int{a, b})
				}
			}
		}
	}
	return out
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (w *World) startFault(f Fault) {
	w.trace("fault starts: %s", f)
	switch f.Kind {
	case FaultCrashServer:
		w.crashServer(f.Server)
		return
	case FaultRotServer:
		w.crashServer(f.Server)
		if w.srv[f.Server].disk.rot() {
			w.stats.DisksRotted++
		}
		return
	case FaultPauseServer:
		if f.Server < 0 {
			for i := range w.srv {
				w.freeze(i, f.Dur)
			}
		} else {
			w.freeze(f.Server, f.Dur)
		}
		return
	case FaultLagServers:
		w.startLag(f)
		return
	case FaultRestartAll:
		for i := range w.srv {
			w.crashServer(i)
		}
		return
	case FaultOverflow:
		until := w.now + f.Dur
		for _, s := range f.Servers {
			w.overflowUntil[s] = max(w.overflowUntil[s], until)
		}
		return
	case FaultRollingRestart:
		n := len(w.srv) // the servers started by then
		down := f.Dur / time.Duration(n)
		for i := range n {
			w.after(time.Duration(i)*down, func() { w.crashServer(i) })
			w.after(time.Duration(i+1)*down-time.Millisecond, func() { w.restartServer(i) })
		}
		return
	case FaultRevoke:
		w.revoke(f)
		return
	case FaultPauseClient:
		if f.Client < len(w.cli) && w.cli[f.Client].alive {
			if f.OnMessage {
				w.armPause(f.Client, f.Dur)
			} else {
				w.freeze(w.clientNode(f.Client), f.Dur)
			}
		}
		return
	}
	for _, l := range w.faultLinks(f) {
		w.cutLink(l[0], l[1])
	}
}

func (w *World) endFault(f Fault) {
	w.trace("fault heals: %s", f)
	switch f.Kind {
	case FaultCrashServer, FaultRotServer:
		w.restartServer(f.Server)
		return
	case FaultPauseServer, FaultPauseClient:
		delete(w.armed, w.clientNode(f.Client)) // a pause armed on a message that never came
		return
	case FaultLagServers:
		return // its channels catch up by themselves: what they held is due now
	case FaultRestartAll:
		for i := range w.srv {
			w.restartServer(i)
		}
		return
	case FaultRollingRestart:
		return // each server came back on its own schedule
	case FaultRevoke:
		return // for good
	case FaultOverflow:
		return // the queues drained by themselves
	}
	for _, l := range w.faultLinks(f) {
		w.healLink(l[0], l[1])
	}
}

// crashServer loses the server's memory and in-flight messages; its disk stays.
func (w *World) crashServer(i int) {
	s := w.srv[i]
	if !s.up {
		return
	}
	w.stats.ServerCrashes++
	delete(w.paused, i)
	s.up, s.core = false, nil
	s.gen++
	s.order, s.diskFree, s.repair = core.Pipeline{}, 0, core.Repair{}
	w.bumpEpochs(i)
	for o := range w.srv {
		if o != i && w.srv[o].up && w.cut[i][o] == 0 {
			w.serverStep(o, core.Input{Kind: core.InputDisconnected, From: wire.ServerPeer(wire.ServerID(i))})
		}
	}
}

// restartServer builds a new core from the disk, checks that it kept every
// statement it acknowledged, and reconnects it.
func (w *World) restartServer(i int) {
	s := w.srv[i]
	if s.up || s.failed {
		return
	}
	c, err := core.New(s.cfg)
	if err != nil {
		panic(fmt.Sprintf("sim: building core: %v", err))
	}
	if err := c.Restore(s.disk); errors.Is(err, errRotten) {
		// Fail-stop (change 69): the store found the damage; the server
		// says nothing and stays down, a crash within f.
		s.failed = true
		w.stats.FailStops++
		w.trace("s%d finds its disk rotten (%v) and stays down for good", i, err)
		return
	} else if err != nil {
		w.h.violate(CheckDurability, w.instant(), "s%d cannot restore its disk: %v", i, err)
	}
	s.core, s.up = c, true
	s.restarts++
	at := w.trace("s%d restarts from its disk", i)
	if s.byz == nil {
		for _, k := range sortedRegKeys(s.acks) {
			want := s.acks[k]
			w.stats.DurabilityChecks++
			id := w.cli[k.client].c.ID()
			st := c.Register(k.lock, id)
			if st == nil && want.Session <= c.ResetUpTo(id) {
				continue // a reset certificate ended the session and collected the value
			}
			if st == nil || quorum.TimestampOf(st).Compare(want) < 0 {
				got := "nothing"
				if st != nil {
					got = st.String()
				}
				w.h.violate(CheckDurability, at, "s%d acknowledged c%d's statement %+v on %s before crashing, but restarted with %s", i, k.client, want, k.lock, got)
			}
		}
		// An Exit acked here and not on the disk was lost with its lazy
		// records (change 29). Once so few members hold it that q reporters
		// can all lack it, reads may see the value before it until its
		// client sends it again or its session is reset.
		for _, k := range sortedRegKeys(s.exitAcks) {
			want := s.exitAcks[k]
			id := w.cli[k.client].c.ID()
			if st := c.Register(k.lock, id); (st == nil || quorum.TimestampOf(st).Compare(want) < 0) && w.readsMayMiss(k.lock, id, want) {
				w.h.lostExit(k.lock, k.client, want)
			}
		}
		clear(s.exitAcks)
	}
	clear(s.reset)
	w.observeResets(i)
	w.bumpEpochs(i)
	for o := range w.cut {
		if o != i && w.reachable(i, o) {
			w.linkUp(i, o)
		}
	}
}

// readsMayMiss reports whether a read of q reporters may now lack the
// statement want of client id on lock: at most n − q of the newest epoch's
// members hold it (a member that is down or faulty counts as lacking it).
func (w *World) readsMayMiss(lock string, id wire.ClientID, want quorum.Timestamp) bool {
	n, holders := 0, 0
	for i, s := range w.srv {
		if !w.member(i) {
			continue
		}
		n++
		if s.byz != nil || !s.up {
			continue
		}
		if st := s.core.Register(lock, id); st != nil && quorum.TimestampOf(st).Compare(want) >= 0 {
			holders++
		}
	}
	return holders <= n-quorum.Size(n, quorum.MaxFaults(n))
}

func sortedRegKeys[V any](m map[regKey]V) []regKey {
	out := make([]regKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].lock != out[j].lock {
			return out[i].lock < out[j].lock
		}
		return out[i].client < out[j].client
	})
	return out
}

// crashClient silences a client forever.
func (w *World) crashClient(c int) {
	cl := w.cli[c]
	if !cl.alive {
		return
	}
	w.stats.ClientCrashes++
	at := w.trace("c%d goes silent (last heartbeat at %.6f)", c, cl.lastHB.Seconds())
	w.h.crashed[c] = at
	// A hold ends when the lease guarantee would have lapsed had the client
	// lived, or lapsed already during a pause it dies in.
	lapse := w.lapseOf(cl)
	if p := w.paused[w.clientNode(c)]; p != nil {
		lapse = min(lapse, p.lapse)
	}
	delete(w.paused, w.clientNode(c))
	delete(w.armed, w.clientNode(c))
	for i := range w.h.holds {
		if hd := &w.h.holds[i]; hd.Client == c && hd.To == never {
			hd.To = Instant{At: lapse}
		}
	}
	for o := range w.srv {
		if w.reachable(o, w.clientNode(c)) {
			w.serverStep(o, core.Input{Kind: core.InputDisconnected, From: wire.ClientPeer(cl.c.ID())})
		}
	}
	cl.alive = false
	w.bumpEpochs(w.clientNode(c))
	// Every correct server must reset it within 2×TTL of its last heartbeat
	// (or of the quiet period, whichever is later), and the time its
	// servers' votes take to travel (resetSlack).
	deadline := max(cl.lastHB, w.quiet) + 2*w.sc.TTL + w.resetSlack()
	w.silentDeadlines = append(w.silentDeadlines, deadline)
	w.At(deadline, func() { w.checkSilentReset(c) })
}

// resetSlack is what the reset of a silent client may take past 2×TTL of
// lease time (docs/protocol.md change 66): a server that holds no lease on
// a session hears of it from f+1 votes, which the others cast as their
// leases run out, and starts a lease of its own only then; so two network
// delays (the votes it hears of, then its own vote that completes the
// certificate) and two ticks (each vote is cast at a tick) come on top.
// Campaign seeds 23004210 and 9112665 took 0.09 s of it.
func (w *World) resetSlack() time.Duration { return 2 * (w.sc.LongDelay + w.sc.TickMax) }

// With membership changes (reconfig.go) it checks the correct members of
// the newest epoch only, a removed member running out no lease, and each
// from the later of the client's deadline and that member's copy's end plus
// 2×TTL (the copy starts every lease afresh); a member still copying is
// checked again later.
func (w *World) checkSilentReset(c int) {
	id := w.cli[c].c.ID()
	at := w.trace("check: is silent c%d out of every active set?", c)
	var again time.Duration
	for i, s := range w.srv {
		if s.byz != nil || !s.up || !w.member(i) {
			continue
		}
		if w.chain != nil {
			if !w.servesNewest(i) {
				again = max(again, w.now+pushRetry)
				continue
			}
			if due := w.activeFrom(i) + 2*w.sc.TTL + w.resetSlack(); due > w.now {
				again = max(again, due)
				continue
			}
		}
		for _, lock := range w.sc.Locks {
			st := s.core.Register(lock, id)
			if st != nil && st.Phase != wire.PhaseExit {
				w.h.violate(CheckReset, at, "c%d went silent at %s (last heartbeat %.6fs) but s%d still holds its %s on %s, not reset (ResetUpTo=%d)",
					c, w.h.crashed[c], w.cli[c].lastHB.Seconds(), i, st, lock, s.core.ResetUpTo(id))
			}
		}
	}
	if again > 0 {
		w.trace("check: c%d again at %.3fs, after the copy of a member of epoch %d", c, again.Seconds(), w.epochNumber())
		w.silentDeadlines = append(w.silentDeadlines, again)
		w.At(again, func() { w.checkSilentReset(c) })
	}
}
