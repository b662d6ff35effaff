package certs

import (
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// Expiring names what ends within 30 days or has ended, and nothing that
// has longer: both sides of the line, for servers and the admission.
func TestExpiring(t *testing.T) {
	now := time.Now()
	c, err := Init(InitOptions{Dir: filepath.Join(t.TempDir(), "c"), Servers: 4}, now, rand.Reader)
	require.NoError(t, err)
	end := c.Servers[0].Cert.NotAfter
	require.Empty(t, Expiring(c, nil, nil, end.Add(-ExpiryNotice-time.Minute)), "31 days ahead: nothing")
	got := Expiring(c, nil, nil, end.Add(-ExpiryNotice+24*time.Hour+time.Minute))
	require.Len(t, got, 4, "every server certificate, 28 days ahead")
	require.Contains(t, got[0], "server 0's certificate expires in 28 days")
	got = Expiring(c, nil, nil, end.Add(time.Hour))
	require.Contains(t, got[3], "server 3's certificate expired on")

	adm := &wire.AdmissionBody{Name: "ci", NotAfter: now.Add(10 * 24 * time.Hour).UnixMilli()}
	got = Expiring(c, nil, adm, now)
	require.Len(t, got, 1)
	require.True(t, strings.HasPrefix(got[0], `this identity's admission certificate ("ci") expires in 9 days`), got[0])
	require.Contains(t, got[0], "bqserver client renew ci")
	adm.NotAfter = now.Add(ExpiryNotice + time.Hour).UnixMilli()
	require.Empty(t, Expiring(c, nil, adm, now))
}
