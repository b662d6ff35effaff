package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// When a max-hold stops CMD (issue 55: CMD was stopped at 1.67 s of a 3 s
// max-hold, and the README said why in one dense sentence). The numbers the
// README and 'lock --help' give are the code's: given up at max-hold −
// (TTL/10 + G + max-hold/20), SIGKILL G/2 later; without --ttl, the longest
// TTL whose margin leaves half the max-hold.
func TestWhenAMaxHoldStopsCMD(t *testing.T) {
	const mh = 3 * time.Second
	require.Equal(t, 2450*time.Millisecond, givenUpAfter(mh, 2*time.Second), "--ttl 2s: 3 − (0.2 + 0.2 + 0.15)")
	require.NoError(t, holdFits(mh, 2*time.Second))
	require.Error(t, holdFits(mh, 10*time.Second), "the default 10s: a margin of 2.15s, more than half of 3s")
	fit := fitTTL(mh, 10*time.Second)
	require.Equal(t, 6750*time.Millisecond, fit)
	require.Equal(t, 1500*time.Millisecond, givenUpAfter(mh, fit), "3 − (0.675 + 0.675 + 0.15)")
	require.Equal(t, 337500*time.Microsecond, killAfter(fit), "SIGKILL at 1.84s")
	require.Equal(t, "bqclient: this identity may hold a lock for at most 3s (its max-hold): taking a lease TTL of 6.75s, which fits it; "+
		"a holding is given up 1.5s after it is taken (CMD gets SIGTERM then; 'bqclient lock --help' says why), and --ttl chooses another",
		fitNote(mh, fit))
}
