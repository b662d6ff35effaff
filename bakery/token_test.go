package bakery

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"sort"
	"testing"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// Fencing tokens compared as users compare them (N as a number, then the
// suffix as a string) order exactly as the bakery enters (Less).
func TestTokenStringOrdersLikeLess(t *testing.T) {
	var toks []Token
	for n := uint64(1); n <= 40; n++ {
		for range 3 {
			var c wire.ClientID
			_, _ = rand.Read(c[:])
			toks = append(toks, Token{N: n % 7, Client: c})
		}
	}
	byLess := append([]Token(nil), toks...)
	sort.Slice(byLess, func(i, j int) bool { return byLess[i].Less(byLess[j]) })
	for i := 1; i < len(byLess); i++ {
		a, b := byLess[i-1], byLess[i]
		var an, bn uint64
		var as, bs string
		_, err := fmt.Sscanf(a.String(), "%d.%s", &an, &as)
		require.NoError(t, err)
		_, err = fmt.Sscanf(b.String(), "%d.%s", &bn, &bs)
		require.NoError(t, err)
		require.True(t, an < bn || (an == bn && as < bs), "%s then %s", a, b)
		require.False(t, b.Less(a))
	}
}

// Ties are not always won by the same identity (the bare ClientID tie-break
// favoured low ids in every contended benchmark): over many tickets each of
// two clients wins about half the ties.
func TestTieBreakIsFair(t *testing.T) {
	var a, b wire.ClientID
	a[0], b[0] = 0x00, 0xff // a would win every tie by id
	wins := 0
	const rounds = 2000
	for n := uint64(1); n <= rounds; n++ {
		if (Token{N: n, Client: a}).Less(Token{N: n, Client: b}) {
			wins++
		}
	}
	require.InDelta(t, rounds/2, wins, rounds/10, "a won %d of %d ties", wins, rounds)
}

// The integer form of a token orders tokens exactly as Less does.
func TestTokenIntegerOrdersAsLess(t *testing.T) {
	ids := make([]wire.ClientID, 6)
	for i := range ids {
		ids[i][0], ids[i][31] = byte(i*37), byte(i)
	}
	var toks []Token
	for _, n := range []uint64{0, 1, 2, 1 << 32, 1<<62 - 1} {
		for _, id := range ids {
			toks = append(toks, Token{N: n, Client: id})
		}
	}
	for _, a := range toks {
		for _, b := range toks {
			x, _ := new(big.Int).SetString(a.Integer(), 10)
			y, _ := new(big.Int).SetString(b.Integer(), 10)
			require.Equal(t, a.Less(b), x.Cmp(y) < 0, "%s vs %s", a, b)
		}
	}
	require.Equal(t, "18446744073709551616", new(big.Int).Lsh(big.NewInt(1), 64).String())
	require.Equal(t, new(big.Int).Add(new(big.Int).Lsh(big.NewInt(7), 64), new(big.Int).SetUint64(Token{N: 7, Client: ids[1]}.TieBreak())).String(), Token{N: 7, Client: ids[1]}.Integer())
}
