// Package certstest makes the operator's proposals epochs in tests, as the
// members of the epoch before would (docs/protocol.md change 49), for the
// tests of packages above certs. Test-only: no production binary links it.
package certstest

import (
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/internal/testutil"
	"github.com/bq-lock/bq/wire"
)

// WriteEndorsed writes plan p and makes its proposal an epoch: each member
// of the epoch before endorses it with the signing key in dir.
func WriteEndorsed(t testing.TB, dir string, p *certs.Plan) {
	t.Helper()
	require.NoError(t, p.Write(dir))
	signers := map[wire.ServerID]*crypto.PrivateKey{}
	endorsers := map[wire.ServerID]*wire.Endorser{}
	for _, m := range p.Before.Members {
		if m.Endorse != nil {
			// Its endorsement keys (change 64), which it then destroys on
			// disk as the member would.
			en, err := certs.LoadMemberEndorser(dir, m.ID, m.Endorse)
			require.NoError(t, err)
			endorsers[m.ID] = en
			continue
		}
		// The key file itself: LoadServer refuses an aged member's material.
		data, err := os.ReadFile(filepath.Join(certs.ServerDir(dir, int(m.ID)), certs.SigningKeyFile))
		require.NoError(t, err)
		b, _ := pem.Decode(data)
		require.NotNil(t, b, "server %d's signing key file", m.ID)
		k, err := crypto.PrivateKeyFromSeed(b.Headers["Scheme"], b.Bytes)
		require.NoError(t, err)
		signers[m.ID] = k
	}
	ep := testutil.EndorseAs(p.Proposal.Proposal, p.Next.Cluster, p.Next.Number, signers, endorsers)
	for id, en := range endorsers {
		require.NoError(t, certs.NewEndorseKeyStore(certs.ServerDir(dir, int(id))).Write(en.State()))
	}
	require.NoError(t, certs.Complete(dir, p.Next.Number, ep))
}
