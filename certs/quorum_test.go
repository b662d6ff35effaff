package certs

import (
	"math/bits"
	"testing"

	"github.com/stretchr/testify/require"
)

// minIntersectionExhaustive is the smallest |A ∩ B| over all pairs of
// q-subsets A, B of n elements, by enumerating every pair (small n only).
func minIntersectionExhaustive(n, q int) int {
	best := n
	for a := uint32(0); a < 1<<n; a++ {
		if bits.OnesCount32(a) != q {
			continue
		}
		for b := uint32(0); b < 1<<n; b++ {
			if bits.OnesCount32(b) == q {
				best = min(best, bits.OnesCount32(a&b))
			}
		}
	}
	return best
}

// minIntersection is the same by a counting argument that enumerates the
// possible overlaps: fix A (all q-subsets are alike under relabelling); B
// takes k elements inside A and q−k of the n−q outside, which needs q−k ≤ n−q.
func minIntersection(n, q int) int {
	for k := 0; k <= q; k++ {
		if q-k <= n-q {
			return k
		}
	}
	panic("unreachable")
}

// referenceQuorum is the smallest q such that any two q-subsets of n servers
// meet in at least f+1 servers and q ≤ n−f (the correct servers alone can
// form a quorum), or 0 if there is none.
func referenceQuorum(n, f int) int {
	for q := 1; q <= n; q++ {
		if minIntersection(n, q) >= f+1 && q <= n-f {
			return q
		}
	}
	return 0
}

func TestMinIntersectionMatchesExhaustive(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for q := 0; q <= n; q++ {
			require.Equal(t, minIntersectionExhaustive(n, q), minIntersection(n, q), "n=%d q=%d", n, q)
		}
	}
}

// docs/protocol.md notation: q = ⌈(n+f+1)/2⌉ is the smallest quorum whose pairs
// meet in a correct server, and it exists exactly when n ≥ 3f+1.
func TestQuorumSizeAgainstBruteForce(t *testing.T) {
	for n := 1; n <= 40; n++ {
		for f := 0; f <= (n-1)/3; f++ {
			want := referenceQuorum(n, f)
			require.NotZero(t, want, "n=%d f=%d must have a quorum", n, f)
			require.Equal(t, want, QuorumSize(n, f), "n=%d f=%d", n, f)
		}
		// One more fault than n tolerates: no quorum system exists.
		require.Zero(t, referenceQuorum(n, (n-1)/3+1), "n=%d f=%d", n, (n-1)/3+1)
		require.Equal(t, (n-1)/3, MaxFaults(n))
	}
	require.Equal(t, 3, QuorumSize(4, 1))
	require.Equal(t, 5, QuorumSize(7, 2))
}
