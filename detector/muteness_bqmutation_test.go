//go:build bqmutation

package detector

import (
	"testing"

	"github.com/bq-lock/bq/internal/mutation"
	"github.com/stretchr/testify/require"
)

// TestNoResetWhileQLeasesLive has teeth: with reset certificates of f+1
// votes (mutation.ResetWithFPlusOne) its scenario resets the live client.
// go test -tags bqmutation -run TestNoResetWhileQLeasesLiveCatchesFPlusOne ./detector
func TestNoResetWhileQLeasesLiveCatchesFPlusOne(t *testing.T) {
	defer mutation.Enable(mutation.ResetWithFPlusOne)()
	for _, tc := range []struct{ n, q int }{{4, 3}, {7, 5}} {
		certs, votes := resetsWhileQLeasesLive(t, tc.n, tc.q)
		require.NotEmpty(t, certs, "n=%d: %d votes and certificates of f+1 votes, yet no certificate", tc.n, votes)
	}
}
