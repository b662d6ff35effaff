package server

import (
	"crypto/rand"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/internal/certstest"
	"github.com/bq-lock/bq/server/metrics"
	"github.com/bq-lock/bq/wire"
)

// Issue 28: a running server's expiry warnings and metric follow the epochs
// it knows — the cluster CA in force after a rotation, and its own
// certificate ending with the retired CA that issued it when that CA ends
// first (a member added before the rotation, not yet replaced).
func TestServerCertificatesFollowARotation(t *testing.T) {
	day := 24 * time.Hour
	dir := filepath.Join(t.TempDir(), "c")
	now := time.Now()
	cl, err := certs.Init(certs.InitOptions{Dir: dir, Servers: 4, F: 1}, now.Add(-certs.CAValidity+20*day), rand.Reader)
	require.NoError(t, err)
	three := wire.ServerID(3)
	for _, ch := range []certs.Change{{Remove: &three, Add: true}, {RotateCA: true}} {
		p, err := certs.PlanChange(dir, ch, now, rand.Reader)
		require.NoError(t, err)
		certstest.WriteEndorsed(t, dir, p)
	}
	m, err := certs.LoadServer(dir, 4)
	require.NoError(t, err)
	k, err := NewProtocolCore(m, nil)
	require.NoError(t, err)
	s := &Server{Material: m, core: k, metrics: metrics.NewRegistry("s4")}
	s.noteCertificates()
	got := s.dependsOn()
	require.Len(t, got, 2)
	require.Equal(t, metrics.CertClusterCA, got[0].Label)
	require.True(t, got[0].NotAfter.After(now.Add(3000*day)), "the CA in force, not the cluster file's")
	require.Equal(t, metrics.CertServer, got[1].Label)
	require.Equal(t, cl.CA.NotAfter, got[1].NotAfter, "this server's certificate ends with its retired issuer")
	require.Contains(t, got[1].What, "retired cluster CA")
	ws := metrics.ExpiryWarnings(now, got)
	require.Len(t, ws, 1)
	require.Contains(t, ws[0].Todo, "bqserver server replace")
}
