package wire_test

import (
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

func TestLockPatternMatch(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"ci/*", "ci/job-1", true},
		{"ci/*", "ci/a/b", false}, // * stops at '/'
		{"ci/**", "ci/a/b", true},
		{"ci/**", "ci/", true},
		{"ci/*", "cd/job", false},
		{"ci/*", "ci", false},
		{"db", "db", true},
		{"db", "db2", false}, // the whole name
		{"db", "xdb", false},
		{"job-?", "job-7", true},
		{"job-?", "job-/", false},
		{"job-?", "job-77", false},
		{"job-?", "job-é", true}, // one character, not one byte
		{"**", "anything/at/all", true},
		{"*", "", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"**/prod", "eu/west/prod", true},
		{"**/prod", "eu/west/prod2", false},
	}
	for _, c := range cases {
		require.Equal(t, c.want, wire.LockPatternMatch(c.pattern, c.name), "%q ~ %q", c.pattern, c.name)
	}
}

// A hostile name cannot make matching slow: memoized, at most
// len(pattern)·len(name) steps.
func TestLockPatternMatchIsNotExponential(t *testing.T) {
	pattern := strings.Repeat("**a", 80) + "**b"
	name := strings.Repeat("a", wire.MaxLockName)
	start := time.Now()
	require.False(t, wire.LockPatternMatch(pattern, name))
	// Generous, for -race on 2 cores: the memoized match takes some 60 000
	// steps (microseconds); an exponential one would not end.
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestAdmissionSignVerify(t *testing.T) {
	ca, err := crypto.GenerateKey(crypto.DefaultScheme, rand.Reader)
	require.NoError(t, err)
	other, err := crypto.GenerateKey(crypto.DefaultScheme, rand.Reader)
	require.NoError(t, err)
	cluster := wire.ClusterID{1}
	now := time.Now()
	body := &wire.AdmissionBody{Serial: 1, Name: "ci", Client: wire.ClientID{7}, Locks: []string{"ci/*"},
		NotBefore: now.Add(-time.Minute).UnixMilli(), NotAfter: now.Add(time.Hour).UnixMilli()}
	s, err := wire.SignAdmission(ca, cluster, body)
	require.NoError(t, err)

	got, err := wire.VerifyAdmission(ca.Public, cluster, s)
	require.NoError(t, err)
	require.Equal(t, "ci", got.Name)
	require.NoError(t, got.ValidAt(now))
	require.ErrorContains(t, got.ValidAt(now.Add(2*time.Hour)), "expired")
	require.ErrorContains(t, got.ValidAt(now.Add(-time.Hour)), "valid only from")
	require.True(t, got.Allows("ci/1"))
	require.False(t, got.Allows("prod/db"))

	_, err = wire.VerifyAdmission(other.Public, cluster, s)
	require.ErrorContains(t, err, "not signed by this cluster's client CA")
	_, err = wire.VerifyAdmission(ca.Public, wire.ClusterID{2}, s)
	require.ErrorIs(t, err, wire.ErrForeignCluster)
	s.Body[len(s.Body)-1] ^= 1
	_, err = wire.VerifyAdmission(ca.Public, cluster, s)
	require.ErrorIs(t, err, wire.ErrInvalid)

	// A revocation is not an admission: domains keep them apart.
	r, err := wire.SignRevocation(ca, cluster, &wire.RevocationBody{Client: wire.ClientID{7}, Name: "ci"})
	require.NoError(t, err)
	_, err = wire.VerifyAdmission(ca.Public, cluster, r)
	require.Error(t, err)
	rb, err := wire.VerifyRevocation(ca.Public, cluster, r)
	require.NoError(t, err)
	require.Equal(t, wire.ClientID{7}, rb.Client)
	_, err = wire.VerifyRevocation(other.Public, cluster, r)
	require.Error(t, err)
}

func TestAdmissionBodyBounds(t *testing.T) {
	ca, err := crypto.GenerateKey(crypto.DefaultScheme, rand.Reader)
	require.NoError(t, err)
	for _, b := range []*wire.AdmissionBody{
		{Name: "", NotAfter: 1},
		{Name: strings.Repeat("n", wire.MaxClientName+1), NotAfter: 1},
		{Name: "x", Locks: make([]string, wire.MaxLockPatterns+1), NotAfter: 1},
		{Name: "x", Locks: []string{""}, NotAfter: 1},
		{Name: "x", NotBefore: 5, NotAfter: 5},
	} {
		_, err := wire.SignAdmission(ca, wire.ClusterID{}, b)
		require.ErrorIs(t, err, wire.ErrInvalid, "%+v", b)
	}
}

// BenchmarkLockPatternMatch: the permission check runs on every request
// of a closed cluster, once per pattern.
func BenchmarkLockPatternMatch(b *testing.B) {
	for _, c := range []struct{ name, pattern, lock string }{
		{"literal", "prod/db", "prod/db"},
		{"prefix", "ci/**", "ci/jobs/build-1234/deploy"},
		{"star", "ci/*/deploy", "ci/build-1234/deploy"},
		{"long-name", "ci/**", strings.Repeat("x", wire.MaxLockName)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				wire.LockPatternMatch(c.pattern, c.lock)
			}
		})
	}
}
