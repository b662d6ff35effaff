package omega

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/internal/testseed"
	"github.com/bq-lock/bq/wire"
)

func ids(m int) []wire.ClientID {
	out := make([]wire.ClientID, m)
	for i := range out {
		out[i][0] = byte(i + 1)
	}
	return out
}

func TestConfig(t *testing.T) {
	c := ids(3)
	_, err := New(Config{Candidates: c, Self: c[0], T: 1})
	require.NoError(t, err)
	_, err = New(Config{Candidates: c, Self: c[0], T: 2})
	require.ErrorContains(t, err, "2t+1")
	_, err = New(Config{Candidates: c, Self: wire.ClientID{9}, T: 0})
	require.ErrorContains(t, err, "not a candidate")
	_, err = New(Config{Candidates: []wire.ClientID{c[0], c[0]}, Self: c[0]})
	require.ErrorContains(t, err, "twice")
	_, err = New(Config{Candidates: ids(MaxCandidates + 1), Self: ids(1)[0]})
	require.Error(t, err)
}

// A reader punishes exactly the candidates whose alive counter did not
// advance since its previous read (silent, gone, garbled or stale).
func TestReadPunishesWhoDidNotAdvance(t *testing.T) {
	c := ids(4)
	o, err := New(Config{Candidates: c, Self: c[0], T: 1})
	require.NoError(t, err)
	reg := func(alive uint64) *Register { return &Register{Alive: alive, Punish: make([]uint64, 4)} }
	require.Equal(t, Register{Alive: 1, Punish: []uint64{0, 0, 0, 0}}, o.Next())
	defer func() {
		// A new incarnation counts as an advance, even with a lower Alive.
		o.Read([]*Register{nil, {Incarnation: 1, Alive: 1, Punish: make([]uint64, 4)}, nil, nil})
		require.Equal(t, uint64(0), o.punish[1], "c1 restarted: not punished")
	}()
	o.Read([]*Register{nil, reg(1), reg(1), nil})
	require.Equal(t, []uint64{0, 0, 0, 1}, o.punish)
	o.Next()
	o.Read([]*Register{nil, reg(2), reg(1), {Alive: 5, Punish: []uint64{1}}}) // c2 stale, c3 garbled
	require.Equal(t, []uint64{0, 0, 1, 2}, o.punish)
	o.Next()
	o.Read([]*Register{nil, reg(3), reg(0), reg(1)}) // c2 went back: no advance; c3 advanced
	require.Equal(t, []uint64{0, 0, 2, 2}, o.punish)
	require.Equal(t, c[0], o.Leader())
}

// t Byzantine rows can neither raise a candidate's level nor hide one's
// punishment; t+1 of them can.
func TestLevelIsTheTPlusFirstLargest(t *testing.T) {
	c := ids(5)
	o, err := New(Config{Candidates: c, Self: c[0], T: 1})
	require.NoError(t, err)
	all := func(alive uint64, row ...uint64) *Register { return &Register{Alive: alive, Punish: row} }
	// c4 is Byzantine and punishes c0 (the leader) without end.
	o.Read([]*Register{nil, all(1, 0, 0, 0, 0, 0), all(1, 0, 0, 0, 0, 0), all(1, 0, 0, 0, 0, 0), all(1, 1_000_000, 0, 0, 0, 0)})
	require.Equal(t, c[0], o.Leader(), "one Byzantine row is ignored")
	require.Equal(t, uint64(0), o.Levels()[0])
	// A second punishing row (t+1 = 2) raises c0's level.
	o.Read([]*Register{nil, all(2, 0, 0, 0, 0, 0), all(2, 0, 0, 0, 0, 0), all(2, 7, 0, 0, 0, 0), all(2, 1_000_000, 0, 0, 0, 0)})
	require.Equal(t, uint64(7), o.Levels()[0])
	require.Equal(t, c[1], o.Leader())
}

// Under the assumption, every correct candidate ends up trusting the same
// correct leader for ever: a randomized schedule (its seed printed, and
// replayed with BQ_OMEGA_SEED) where ℓ = c3 writes between any two reads of
// the others, the others write when they get to, c1 crashes early and c4 is
// Byzantine (its row punishes every other candidate without end; it writes
// as it likes).
func TestConvergesUnderTheAssumption(tt *testing.T) {
	seed := uint64(rand.Int64())
	if s := os.Getenv("BQ_OMEGA_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(tt, err, "BQ_OMEGA_SEED")
	}
	// Every failure names the seed and the command that replays it.
	t := testseed.New(tt, seed, fmt.Sprintf("BQ_OMEGA_SEED=%d go test ./omega -run '^TestConvergesUnderTheAssumption$'", seed))
	r := rand.New(rand.NewPCG(seed, 1))
	const m, ell, crashed, byz, steps = 5, 3, 1, 4, 20000
	c := ids(m)
	var os_ [m]*Oracle
	var regs [m]*Register // what the servers show now
	for i := range m {
		o, err := New(Config{Candidates: c, Self: c[i], T: 1})
		require.NoError(t, err)
		os_[i] = o
	}
	byzAlive := uint64(0)
	lastChange := make([]int, m)
	step0 := 0
	leaders := make([]wire.ClientID, m)
	read := func(i int) {
		view := make([]*Register, m)
		for j := range m {
			if regs[j] != nil && (j == ell || r.IntN(10) > 0) { // a read may miss one now and then (a stale server), never ℓ's last write
				x := *regs[j]
				view[j] = &x
			}
		}
		os_[i].Read(view)
		if l := os_[i].Leader(); l != leaders[i] {
			leaders[i], lastChange[i] = l, step0
		}
	}
	for step := range steps {
		step0 = step
		// ℓ writes and reads at every step; the others' turns come at random.
		nr := os_[ell].Next()
		regs[ell] = &nr
		read(ell)
		i := r.IntN(m)
		switch {
		case i == ell:
			continue
		case i == crashed && step > 100:
			regs[crashed] = nil // its lease ran out: its register is gone
			continue
		case i == byz:
			byzAlive += uint64(r.IntN(3))
			regs[byz] = &Register{Alive: byzAlive, Punish: []uint64{uint64(step), uint64(step), uint64(step), uint64(step), 0}}
			continue
		}
		nr = os_[i].Next()
		regs[i] = &nr
		read(i)
	}
	for _, i := range []int{0, 2, ell} {
		require.Equal(t, c[ell], leaders[i], "c%d trusts %v; levels %v", i, leaders[i], os_[i].Levels())
		require.Less(t, lastChange[i], steps/2, "c%d changed its mind late (step %d)", i, lastChange[i])
	}
}
