// Package omega is a time-free eventual leader oracle (Ω) for a fixed set
// of candidates, built on single-writer signed registers (docs/election.md,
// "A time-free alternative"), as a pure state machine: no clock, socket or
// randomness inside.
//
// Each candidate i, in rounds, writes its register — an alive counter that
// grows by one a round and its punishment row — then reads every
// candidate's register. The candidates whose alive counter advanced since
// i's previous read responded; every other one is punished in i's row (+1).
// A candidate's level is the (t+1)-th largest of the punishments the rows
// give it, so that t Byzantine rows can neither raise nor hide it, and the
// leader is the candidate with the least level (ties: the lower id).
//
// The assumption (time-free: a relative speed, no bound on delays): some
// correct candidate ℓ eventually writes at least once between any two
// consecutive reads of every correct candidate. Then ℓ's level stops
// growing, while a crashed candidate's grows without bound in every correct
// row, and with m ≥ 2t+1 candidates in the (t+1)-th largest too. Levels
// only grow, so those that stay bounded end up constant, and every correct
// candidate ends up trusting the same one — for ever.
package omega

import (
	"errors"
	"fmt"
	"slices"

	"github.com/bq-lock/bq/wire"
)

// Config is one oracle's candidates and fault bound.
type Config struct {
	// Candidates is Π, the same list at every candidate (order matters: it
	// breaks ties between equal levels).
	Candidates []wire.ClientID
	// Self is this candidate.
	Self wire.ClientID
	// T is how many candidates may be Byzantine; len(Candidates) ≥ 2T+1.
	T int
	// Incarnation is this run's incarnation number (see Register).
	Incarnation uint64
}

// MaxCandidates bounds Π, so that a register stays under 1 KiB.
const MaxCandidates = 64

// Register is what a candidate writes each round.
type Register struct {
	// Incarnation grows each time the candidate starts again (the seed's
	// crash-recovery incarnation number: bq uses the session number, kept
	// on stable storage); Alive grows by one a round within it.
	Incarnation uint64   `cbor:"1,keyasint"`
	Alive       uint64   `cbor:"2,keyasint"`
	Punish      []uint64 `cbor:"3,keyasint"` // one per candidate, in Config order
}

// after reports whether r was written after (inc, alive).
func (r *Register) after(inc, alive uint64) bool {
	return r.Incarnation > inc || (r.Incarnation == inc && r.Alive > alive)
}

// Oracle is one candidate's state.
// INVARIANT: len(punish) == len(last) == len(rows) == m; rows[self] is
// punish; every row entry only grows, and so does every last.
type Oracle struct {
	cfg     Config
	self, m int
	alive   uint64
	punish  []uint64    // this candidate's row
	last    [][2]uint64 // each candidate's (incarnation, alive) at the previous read
	rows    [][]uint64  // the highest row read of each candidate, entry by entry
	leader  int
	rounds  uint64
}

// New makes candidate cfg.Self's oracle.
func New(cfg Config) (*Oracle, error) {
	m := len(cfg.Candidates)
	switch {
	case m == 0 || m > MaxCandidates:
		return nil, fmt.Errorf("omega: %d candidates (1 to %d)", m, MaxCandidates)
	case cfg.T < 0 || m < 2*cfg.T+1:
		return nil, fmt.Errorf("omega: %d candidates cannot tolerate %d Byzantine ones (need at least 2t+1 = %d)", m, cfg.T, 2*cfg.T+1)
	}
	self := slices.Index(cfg.Candidates, cfg.Self)
	if self < 0 {
		return nil, errors.New("omega: this client is not a candidate")
	}
	for i, c := range cfg.Candidates {
		if slices.Index(cfg.Candidates, c) != i {
			return nil, fmt.Errorf("omega: candidate %s listed twice", c)
		}
	}
	o := &Oracle{cfg: cfg, self: self, m: m, punish: make([]uint64, m), last: make([][2]uint64, m), rows: make([][]uint64, m)}
	for j := range o.rows {
		o.rows[j] = make([]uint64, m)
	}
	o.rows[self] = o.punish
	o.leader = o.decide()
	return o, nil
}

// Next is the register to write for a new round.
func (o *Oracle) Next() Register {
	o.alive++
	return Register{Incarnation: o.cfg.Incarnation, Alive: o.alive, Punish: slices.Clone(o.punish)}
}

// Read takes what a round's read found once its write completed: regs[j]
// is candidate j's register (nil: none found), in Config order. Registers
// of the wrong shape count as none.
func (o *Oracle) Read(regs []*Register) {
	o.rounds++
	for j := range o.m {
		if j == o.self {
			continue
		}
		r := regs[j]
		if r == nil || len(r.Punish) != o.m {
			o.punish[j]++ // silent, gone or garbled: did not respond
			continue
		}
		if !r.after(o.last[j][0], o.last[j][1]) {
			o.punish[j]++
		} else {
			o.last[j] = [2]uint64{r.Incarnation, r.Alive}
		}
		for k, p := range r.Punish {
			o.rows[j][k] = max(o.rows[j][k], p)
		}
	}
	o.leader = o.decide()
}

// level is candidate j's punishment level: the (T+1)-th largest entry of
// the rows for j.
func (o *Oracle) level(j int) uint64 {
	col := make([]uint64, o.m)
	for k := range o.m {
		col[k] = o.rows[k][j]
	}
	slices.Sort(col)
	return col[o.m-1-o.cfg.T]
}

func (o *Oracle) decide() int {
	best := 0
	for j := 1; j < o.m; j++ {
		if o.level(j) < o.level(best) {
			best = j
		}
	}
	return best
}

// Leader is the candidate this one trusts now.
func (o *Oracle) Leader() wire.ClientID { return o.cfg.Candidates[o.leader] }

// Levels are every candidate's level, in Config order.
func (o *Oracle) Levels() []uint64 {
	out := make([]uint64, o.m)
	for j := range out {
		out[j] = o.level(j)
	}
	return out
}

// Rounds is how many reads the oracle took.
func (o *Oracle) Rounds() uint64 { return o.rounds }
