package bq

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/wire"
)

// Issue 55, item 3: a waiter behind holders of another mode says which mode
// they hold in, and, when the two would share among their own kind (another
// semaphore count, readers against a semaphore's holders, a plain lock
// against a semaphore), that the modes differ: a typo in a count otherwise
// waits for ever behind "held by …".
func TestAWaitSaysTheModeItWaitsFor(t *testing.T) {
	var x, y wire.ClientID
	x[0], y[0] = 0x9f, 0x3c
	held := func(c wire.ClientID, n uint64, h Mode) bakery.Ahead {
		return bakery.Ahead{Client: c, Statement: &wire.Statement{Client: c, Phase: wire.PhaseHeld, N: n, Mode: h.Mode, Permits: h.Permits}}
	}
	ticket := func(c wire.ClientID, n uint64, h Mode) bakery.Ahead {
		return bakery.Ahead{Client: c, Statement: &wire.Statement{Client: c, Phase: wire.PhaseTicket, N: n, Mode: h.Mode, Permits: h.Permits}}
	}
	excl, shared := Mode{}, Mode{Mode: wire.ModeShared}
	permits := func(k uint32) Mode { return Mode{Mode: wire.ModePermits, Permits: k} }
	tok := func(c wire.ClientID, n uint64) string { return Token{N: n, Client: c}.String() }
	X, Y := x.Hex()[:16], y.Hex()[:16]
	for _, tc := range []struct {
		asked Mode
		ahead []bakery.Ahead
		want  string
	}{
		{excl, []bakery.Ahead{held(x, 4, excl)}, `"L": held by ` + X + ` (token ` + tok(x, 4) + `)`},
		{excl, []bakery.Ahead{held(y, 5, shared), held(x, 4, shared), ticket(y, 6, excl)},
			`"L": held shared by ` + X + ` (token ` + tok(x, 4) + `) and 1 more holders, 1 more ahead`},
		{permits(3), []bakery.Ahead{held(x, 4, permits(2))},
			`"L": held as 2 permits by ` + X + ` (token ` + tok(x, 4) + `); you asked for 3 permits: a semaphore's holders must all give the same count`},
		{permits(3), []bakery.Ahead{held(x, 4, shared)},
			`"L": held shared by ` + X + ` (token ` + tok(x, 4) + `); you asked for one of 3 permits: a semaphore's holders and readers (shared) exclude each other`},
		{permits(3), []bakery.Ahead{held(x, 4, excl)},
			`"L": held by ` + X + ` (token ` + tok(x, 4) + `); you asked for one of 3 permits: an exclusive holder (a plain lock of the name) excludes everyone`},
		{shared, []bakery.Ahead{held(x, 4, permits(2))},
			`"L": held as 2 permits by ` + X + ` (token ` + tok(x, 4) + `); you asked to share it as a reader: readers and a semaphore's holders (2 permits) exclude each other`},
		{shared, []bakery.Ahead{held(x, 4, excl)}, `"L": held by ` + X + ` (token ` + tok(x, 4) + `)`},
		{permits(2), []bakery.Ahead{held(x, 4, permits(2)), held(y, 5, permits(2))},
			`"L": held as 2 permits by ` + X + ` (token ` + tok(x, 4) + `) and 1 more holders`},
		{permits(3), []bakery.Ahead{ticket(y, 6, permits(2))},
			`"L": ` + Y + ` ahead (ticket 6, 2 permits); you asked for 3 permits: a semaphore's holders must all give the same count`},
	} {
		got, servers := describeWait("L", tc.asked, bakery.Wait{Phase: "listen", Answered: 3, Need: 3, Ahead: tc.ahead}, 4)
		require.False(t, servers)
		require.Equal(t, tc.want, got, "asked %s", tc.asked)
	}
}

// The same with a real cluster: a semaphore of 3 against holders of 2 is
// busy saying so, and a waiting one's Waiting says it too, with clash set
// (what bqclient tells its user once); nothing waits once it gave up.
func TestAnotherCountIsNamed(t *testing.T) {
	tc := newCluster(t, 4)
	ctx := ctxFor(t, waitTimeout)
	holder := tc.dial(Config{})
	h, err := holder.Semaphore("pool", 2).Acquire(ctx)
	require.NoError(t, err)
	hint := `"pool" is busy: held as 2 permits by ` + holder.ID().Hex()[:16] + ` (token ` + h.Token().String() + `); you asked for 3 permits: a semaphore's holders must all give the same count`

	other := tc.dial(Config{})
	_, err = other.Semaphore("pool", 3).TryAcquire(ctx)
	require.ErrorIs(t, err, ErrBusy)
	require.EqualError(t, err, "bq: lock "+hint)

	wait, cancel := context.WithCancel(ctx)
	defer cancel()
	r := holdAsync(func() (*Holding, error) { return other.Semaphore("pool", 3).Acquire(wait) })
	require.Eventually(t, func() bool { _, clash := other.Waiting("pool"); return clash }, 10*time.Second, 20*time.Millisecond)
	what, _ := other.Waiting("pool")
	require.Equal(t, `held as 2 permits by `+holder.ID().Hex()[:16]+` (token `+h.Token().String()+`); you asked for 3 permits: a semaphore's holders must all give the same count`, what)
	cancel()
	require.ErrorIs(t, (<-r).err, context.Canceled)

	what, clash := other.Waiting("pool")
	require.False(t, clash, "nothing waits: %q", what)
	require.NoError(t, h.Unlock(ctx))
}
