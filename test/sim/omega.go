package sim

import (
	"fmt"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/omega"
	"github.com/bq-lock/bq/wire"
)

// The time-free oracle (docs/protocol.md §11.1) in the simulator. Clients
// of RoleCandidate each hold their register lock (ω/c<i>) for the whole run
// and, in rounds, proclaim their register (the write: q acks), then read
// every other candidate's with Status (q replies each, the newest verified
// value), and feed the oracle. Scenario.Omega sets each candidate's pause
// and which one, if any, is Byzantine (it punishes everyone in its row).
// The checker: once the workload stops, every live correct candidate
// trusts the same live candidate, and has for the last OmegaStable.

// CheckOmega is the oracle checker's name.
const CheckOmega = "omega-agreement"

// OmegaStable is how long before the end of the workload the correct
// candidates' trust must have stopped moving.
const OmegaStable = 5 * time.Second

// OmegaScenario configures the oracle's candidates.
type OmegaScenario struct {
	// Pauses: each candidate's pause between rounds, in the order of the
	// RoleCandidate clients.
	Pauses []time.Duration
	// T is the oracle's t; Punisher is the candidate (by that order) that
	// is Byzantine, or -1.
	T, Punisher int
	// Unchecked: the assumption may not hold (a test that only reports
	// what happens), so checkOmega does not run.
	Unchecked bool
}

// simCandidate is one candidate's round state.
type simCandidate struct {
	c, idx  int
	core    *omega.Oracle
	pause   time.Duration
	byz     bool
	held    *bakery.Event // the register lock's holding, nil while not held
	running bool
	acks    map[int]bool
	regs    []*omega.Register
	left    int // reads of this round still waiting for q replies
	trust   wire.ClientID
	changed Instant
}

func regLockOf(c int) string { return fmt.Sprintf("ω/c%d", c) }

// startOmega makes the candidates' oracles.
func (w *World) startOmega() error {
	var cands []int
	for c, r := range w.sc.Roles {
		if r == RoleCandidate {
			cands = append(cands, c)
		}
	}
	if len(cands) != len(w.sc.Omega.Pauses) {
		return fmt.Errorf("sim: %d candidates and %d pauses", len(cands), len(w.sc.Omega.Pauses))
	}
	ids := make([]wire.ClientID, len(cands))
	for i, c := range cands {
		ids[i] = w.cli[c].c.ID()
	}
	w.cands = make(map[int]*simCandidate)
	for i, c := range cands {
		core, err := omega.New(omega.Config{Candidates: ids, Self: ids[i], T: w.sc.Omega.T, Incarnation: 1})
		if err != nil {
			return err
		}
		w.cands[c] = &simCandidate{c: c, idx: i, core: core, pause: w.sc.Omega.Pauses[i], byz: i == w.sc.Omega.Punisher, trust: core.Leader()}
	}
	w.candIDs = ids
	w.candClients = cands
	for _, c := range cands {
		// Candidates start together, once their sessions are open: a late
		// one would carry the others' early punishments for long.
		w.after(100*time.Millisecond, w.cli[c].drv.wake)
	}
	return nil
}

// candidateWake takes the register lock if the candidate holds none.
func (w *World) candidateWake(d *driver) {
	cd := w.cands[d.c]
	if cd.held != nil || w.cli[d.c].c.Attempt(regLockOf(d.c)) != 0 {
		return
	}
	if err := w.Lock(d.c, regLockOf(d.c), false); err != nil {
		d.after(pollEvery, d.wake)
	}
}

// candidateEvent follows the register lock: rounds run while it is held.
func (w *World) candidateEvent(d *driver, ev bakery.Event) {
	cd := w.cands[d.c]
	switch ev.Kind {
	case bakery.Acquired:
		e := ev
		cd.held = &e
		if !cd.running {
			cd.running = true
			d.after(0, func() { w.omegaWrite(cd) })
		}
	case bakery.Lost, bakery.Failed, bakery.Released:
		cd.held = nil
		d.after(pollEvery, d.wake)
	}
}

// omegaWrite starts a round: the candidate's register, proclaimed.
func (w *World) omegaWrite(cd *simCandidate) {
	cl := w.cli[cd.c]
	if !cl.alive || w.now >= w.stop {
		cd.running = false
		return
	}
	if cd.held == nil {
		cd.running = false // candidateEvent starts again once it holds
		return
	}
	reg := cd.core.Next()
	if cd.byz {
		for j := range reg.Punish {
			if j != cd.idx {
				reg.Punish[j] = uint64(w.now / time.Millisecond) // everyone, without end
			}
		}
	}
	value, err := crypto.Marshal(reg)
	if err != nil {
		w.h.violate(CheckCrash, w.instant(), "c%d cannot encode its register: %v", cd.c, err)
		return
	}
	sp, err := wire.SignProclamation(cl.key, w.keys.Cluster, &wire.ProclamationBody{Lock: regLockOf(cd.c), Client: cl.c.ID(),
		Session: cl.c.Session(), Attempt: cd.held.Attempt, N: cd.held.Token.N, Rev: reg.Alive, Value: value})
	if err != nil {
		w.h.violate(CheckCrash, w.instant(), "c%d cannot sign its register: %v", cd.c, err)
		return
	}
	cd.acks = make(map[int]bool)
	w.sendProclamation(cd.c, regLockOf(cd.c), cd.held.Attempt, sp, func(server int) {
		if cd.acks == nil || cd.acks[server] {
			return
		}
		if !w.dials(cd.c, server) {
			return // no member of the candidate's epoch (it moved since it wrote)
		}
		cd.acks[server] = true
		if _, _, q := w.cli[cd.c].c.Members(); len(cd.acks) == q { // its epoch's q (it follows changes)
			cd.acks = nil
			w.omegaRead(cd)
		}
	})
}

// omegaRead reads every other candidate's register.
func (w *World) omegaRead(cd *simCandidate) {
	cd.regs = make([]*omega.Register, len(w.candClients))
	cd.left = len(w.candClients) - 1
	for j, c := range w.candClients {
		if j == cd.idx {
			continue
		}
		w.readStatus(cd.c, regLockOf(c), func(replies map[int]*wire.StatusReply) {
			rs := make([]*wire.StatusReply, 0, len(replies))
			for s := range w.srv { // the members of the reader's epoch (leaderReply counted those)
				if r := replies[s]; r != nil {
					rs = append(rs, r)
				}
			}
			cd.regs[j] = omega.Newest(w.keys.Cluster, w.candIDs[j], regLockOf(c), rs)
			if cd.left--; cd.left == 0 {
				w.omegaDecide(cd)
			}
		})
	}
}

// omegaDecide feeds the round's reads to the oracle and schedules the next.
func (w *World) omegaDecide(cd *simCandidate) {
	cd.core.Read(cd.regs)
	if l := cd.core.Leader(); l != cd.trust {
		cd.trust, cd.changed = l, w.trace("c%d trusts %s (levels %v)", cd.c, w.clientName(l), cd.core.Levels())
	}
	w.cli[cd.c].drv.after(cd.pause, func() { w.omegaWrite(cd) })
}

// checkOmega: every live correct candidate trusts the same live candidate,
// and has since OmegaStable before the workload stopped.
func (w *World) checkOmega() {
	at := w.instant()
	var trust wire.ClientID
	first := true
	for _, c := range w.candClients {
		cd := w.cands[c]
		if cd.byz || !w.cli[c].alive {
			continue
		}
		if first {
			trust, first = cd.trust, false
		}
		if cd.trust != trust {
			w.h.violate(CheckOmega, at, "c%d trusts %s while another correct candidate trusts %s", c, w.clientName(cd.trust), w.clientName(trust))
		}
		if w.stop-cd.changed.At < OmegaStable {
			w.h.violate(CheckOmega, at, "c%d changed its trust at %s, less than %v before the workload stopped", c, cd.changed, OmegaStable)
		}
	}
	if c, ok := w.byID[trust]; !first && ok && !w.cli[c].alive {
		w.h.violate(CheckOmega, at, "the correct candidates trust c%d, which is down", c)
	}
}
