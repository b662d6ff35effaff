package bq

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// agree waits until every oracle trusts the same candidate and still does
// after each of them completed 10 more rounds (each round reads every
// server: the wait is on events, not on a guess at timing).
func agree(t *testing.T, os ...*Omega) wire.ClientID {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		l := os[0].Leader()
		same := func() bool {
			for _, o := range os {
				if o.Leader() != l {
					return false
				}
			}
			return true
		}
		if same() {
			start := make([]uint64, len(os))
			for i, o := range os {
				start[i] = o.Rounds()
			}
			stable := true
			for i := 0; i < len(os) && stable; {
				if os[i].Rounds() >= start[i]+10 {
					i++
					continue
				}
				stable = same()
				time.Sleep(5 * time.Millisecond)
			}
			if stable && same() {
				return l
			}
		}
		if time.Now().After(deadline) {
			for _, o := range os {
				t.Logf("trusts %s, levels %v", o.Leader(), o.Levels())
			}
			t.Fatalf("the candidates never agreed for 10 rounds")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The time-free oracle on real servers: three candidates (t = 1) that pause
// 10, 40 and 120 ms between rounds. They end up trusting the same one; once
// it stops, the other two trust another one, and the stopped one's level
// only grows.
func TestOmegaConvergesAndMovesOn(t *testing.T) {
	tc := newCluster(t, 4)
	clients := []*Client{tc.dial(Config{}), tc.dial(Config{}), tc.dial(Config{})}
	ctx := ctxFor(t, 2*waitTimeout)
	cands := []wire.ClientID{clients[2].ID(), clients[1].ID(), clients[0].ID()}
	var os []*Omega
	for i, pause := range []time.Duration{10 * time.Millisecond, 40 * time.Millisecond, 120 * time.Millisecond} {
		o, err := clients[i].StartOmega(ctx, "sched", OmegaConfig{Candidates: cands, T: 1, Pause: pause})
		require.NoError(t, err)
		os = append(os, o)
	}
	first := agree(t, os...)
	stopped := slices.IndexFunc(clients, func(c *Client) bool { return c.ID() == first })
	require.NoError(t, os[stopped].Stop())
	rest := slices.Delete(slices.Clone(os), stopped, stopped+1)
	second := agree(t, rest...)
	require.NotEqual(t, first, second)
	col := slices.Index(cands, first)
	before := rest[0].Levels()[col]
	// Each reader's level rests on the other's row: wait for rounds of both.
	n0, n1 := rest[0].Rounds(), rest[1].Rounds()
	for rest[0].Rounds() < n0+5 || rest[1].Rounds() < n1+5 {
		time.Sleep(5 * time.Millisecond)
	}
	require.Greater(t, rest[0].Levels()[col], before, "the stopped candidate's level grows")
	for _, o := range rest {
		require.NoError(t, o.Stop())
	}

	_, err := clients[0].StartOmega(ctx, "sched", OmegaConfig{Candidates: cands[:2], T: 0})
	require.ErrorContains(t, err, "not a candidate")
	_, err = clients[0].StartOmega(ctx, "sched", OmegaConfig{Candidates: cands, T: 2})
	require.ErrorContains(t, err, "2t+1")
}
