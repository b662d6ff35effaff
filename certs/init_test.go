package certs

import (
	"crypto/rand"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/stretchr/testify/require"
)

func TestInitFilesAndModes(t *testing.T) {
	dir, c := newCluster(t)
	st, err := os.Stat(clusterPath(dir))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), st.Mode().Perm(), "the cluster file is public")

	st, err = os.Stat(filepath.Join(dir, CADirName))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	st, err = os.Stat(filepath.Join(dir, CADirName, CAKeyFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	for i := range c.N {
		st, err := os.Stat(ServerDir(dir, i))
		require.NoError(t, err)
		require.True(t, st.IsDir())
		require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
		for _, name := range []string{TLSKeyFile, TLSCertFile, SigningKeyFile} {
			st, err := os.Stat(privateFile(dir, i, name))
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), name)
		}
		// The signing key file: one PEM block, the scheme in a header, the seed as body.
		data, err := os.ReadFile(privateFile(dir, i, SigningKeyFile))
		require.NoError(t, err)
		b, rest := pem.Decode(data)
		require.NotNil(t, b)
		require.Empty(t, rest)
		require.Equal(t, "BQ SIGNING KEY", b.Type)
		require.Equal(t, map[string]string{"Scheme": crypto.Ed25519}, b.Headers)
		k, err := crypto.PrivateKeyFromSeed(crypto.Ed25519, b.Bytes)
		require.NoError(t, err)
		require.Equal(t, c.Servers[i].SigningKey.ID, k.Public.ID)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, []string{"ca", "cluster.yaml", "server-0", "server-1", "server-2", "server-3"}, names)
}

func TestInitDefaults(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	c, err := Init(InitOptions{Dir: dir, Servers: 7, F: -1}, time.Now(), rand.Reader)
	require.NoError(t, err)
	require.Equal(t, 2, c.F, "negative F means the most 7 servers tolerate")
	require.Equal(t, 5, c.Quorum)
	require.Equal(t, DefaultName, c.Name)
	require.Equal(t, crypto.Ed25519, c.Scheme)
	require.Equal(t, "127.0.0.1:7400", c.Servers[0].Address)
	require.Equal(t, "127.0.0.1:7406", c.Servers[6].Address)

	// F = 0 is taken as given.
	_, c0 := newClusterWith(t, InitOptions{Servers: 4})
	require.Equal(t, 0, c0.F)
	require.Equal(t, 3, c0.Quorum)

	// One server, no faults: the smallest cluster.
	_, c1 := newClusterWith(t, InitOptions{Servers: 1})
	require.Equal(t, 1, c1.Quorum)
}

func TestInitCertificateHosts(t *testing.T) {
	hostsOf := func(c *Cluster, i int) []string {
		var hs []string
		for _, ip := range c.Servers[i].Cert.IPAddresses {
			hs = append(hs, ip.String())
		}
		return append(hs, c.Servers[i].Cert.DNSNames...)
	}
	_, c := newClusterWith(t, InitOptions{Servers: 1, Host: "127.0.0.1"})
	require.ElementsMatch(t, []string{"127.0.0.1", "localhost"}, hostsOf(c, 0))
	_, c = newClusterWith(t, InitOptions{Servers: 1, Host: "localhost"})
	require.ElementsMatch(t, []string{"127.0.0.1", "localhost"}, hostsOf(c, 0))
	require.Equal(t, "localhost:7400", c.Servers[0].Address)
	_, c = newClusterWith(t, InitOptions{Servers: 1, Host: "::1"})
	require.ElementsMatch(t, []string{"::1", "127.0.0.1", "localhost"}, hostsOf(c, 0))
	require.Equal(t, "[::1]:7400", c.Servers[0].Address)
	_, c = newClusterWith(t, InitOptions{Servers: 1, Host: "10.0.0.7"})
	require.ElementsMatch(t, []string{"10.0.0.7"}, hostsOf(c, 0))
	_, c = newClusterWith(t, InitOptions{Servers: 1, Host: "lock.example.com"})
	require.ElementsMatch(t, []string{"lock.example.com"}, hostsOf(c, 0))

	// One host per server.
	dir, c := newClusterWith(t, InitOptions{Servers: 4, F: 1, Host: "a.example, b.example,10.0.0.3,d.example", PortBase: 7000})
	require.Equal(t, []string{"a.example"}, hostsOf(c, 0))
	require.Equal(t, []string{"10.0.0.3"}, hostsOf(c, 2))
	require.Equal(t, "b.example:7001", c.Servers[1].Address)
	_, err := LoadServer(dir, 3)
	require.NoError(t, err)
}

func TestInitRefusesExisting(t *testing.T) {
	dir, first := newCluster(t)
	before, err := os.ReadFile(clusterPath(dir))
	require.NoError(t, err)
	keyBefore, err := os.ReadFile(privateFile(dir, 0, SigningKeyFile))
	require.NoError(t, err)

	_, err = Init(InitOptions{Dir: dir, Servers: 4, F: 1}, time.Now(), rand.Reader)
	require.ErrorContains(t, err, clusterPath(dir)+" already exists: refusing to overwrite an existing cluster")
	require.NotErrorIs(t, err, ErrBadOptions)

	after, err := os.ReadFile(clusterPath(dir))
	require.NoError(t, err)
	require.Equal(t, before, after)
	keyAfter, err := os.ReadFile(privateFile(dir, 0, SigningKeyFile))
	require.NoError(t, err)
	require.Equal(t, keyBefore, keyAfter)
	m, err := LoadServer(dir, 0)
	require.NoError(t, err)
	require.Equal(t, first.Servers[0].SigningKey.ID, m.SigningKey.Public.ID)

	// Leftovers of a cluster without its cluster file are refused too.
	require.NoError(t, os.Remove(clusterPath(dir)))
	_, err = Init(InitOptions{Dir: dir, Servers: 4, F: 1}, time.Now(), rand.Reader)
	require.ErrorContains(t, err, filepath.Join(dir, CADirName)+" already exists")

	// An existing empty directory is fine.
	empty := t.TempDir()
	_, err = Init(InitOptions{Dir: empty, Servers: 4, F: 1}, time.Now(), rand.Reader)
	require.NoError(t, err)
}

func TestInitOptionErrors(t *testing.T) {
	cases := []struct {
		name string
		opts InitOptions
		want []string
	}{
		{"no dir", InitOptions{Servers: 4}, []string{"no directory given"}},
		{"no servers", InitOptions{Dir: "x"}, []string{"--servers 0: a cluster has 1..1024 servers"}},
		{"negative servers", InitOptions{Dir: "x", Servers: -4}, []string{"--servers -4"}},
		{"too few servers for f", InitOptions{Dir: "x", Servers: 3, F: 1}, []string{"--servers 3 cannot tolerate --f 1", "3f+1 = 4", "f is at most 0"}},
		{"port base too high", InitOptions{Dir: "x", Servers: 4, F: 1, PortBase: 65533}, []string{"needs ports up to 65536, beyond 65535"}},
		{"port base not a port", InitOptions{Dir: "x", Servers: 4, F: 1, PortBase: 70000}, []string{"--port-base 70000 is not a port"}},
		{"unknown scheme", InitOptions{Dir: "x", Servers: 4, F: 1, Scheme: "RSA"}, []string{`unknown signature scheme "RSA"`}},
		{"wildcard host", InitOptions{Dir: "x", Servers: 4, F: 1, Host: "0.0.0.0"}, []string{"host 0.0.0.0 is a wildcard address"}},
		{"wrong number of hosts", InitOptions{Dir: "x", Servers: 4, F: 1, Host: "a,b"}, []string{"--host lists 2 hosts for 4 servers"}},
		{"empty host in list", InitOptions{Dir: "x", Servers: 2, Host: "a,"}, []string{"has an empty host"}},
		{"bad name", InitOptions{Dir: "x", Servers: 4, F: 1, Name: "a\nb"}, []string{"a cluster name is 1..64 printable characters"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			if tc.opts.Dir != "" {
				tc.opts.Dir = filepath.Join(base, tc.opts.Dir)
			}
			c, err := Init(tc.opts, time.Now(), rand.Reader)
			require.Nil(t, c)
			require.ErrorIs(t, err, ErrBadOptions)
			requireProblems(t, err, 1, tc.want...)
			entries, err := os.ReadDir(base)
			require.NoError(t, err)
			require.Empty(t, entries, "nothing is written for bad options")
		})
	}
	// Several bad options: one error each.
	_, err := Init(InitOptions{Dir: "x", Servers: 3, F: 1, Scheme: "RSA", PortBase: 70000}, time.Now(), rand.Reader)
	requireProblems(t, err, 3, "cannot tolerate", "RSA", "70000")
}

func TestInitLeavesNothingOnFailure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	_, err := Init(InitOptions{Dir: dir, Servers: 4, F: 1}, time.Now(), &failingReader{n: 100})
	require.ErrorContains(t, err, "entropy ran out")
	_, statErr := os.Stat(dir)
	require.True(t, os.IsNotExist(statErr), "no directory is made when generation fails")

	// A write that fails midway (a server directory appears between the
	// check and the write) removes everything Init wrote.
	dir = t.TempDir()
	w := &writer{}
	w.mkdir(filepath.Join(dir, "a"))
	w.file(filepath.Join(dir, "a", "f"), []byte("x"), 0o600)
	w.file(filepath.Join(dir, "a", "f"), []byte("y"), 0o600) // exists: fails, never overwrites
	require.ErrorContains(t, w.err, "file exists")
	w.undo()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

// The cluster file reads well: plain keys, PEM as literal blocks.
func TestClusterFileFormat(t *testing.T) {
	dir, c := newClusterWith(t, InitOptions{Servers: 4, F: 1, Name: "prod: eu-1"})
	data, err := os.ReadFile(clusterPath(dir))
	require.NoError(t, err)
	text := string(data)
	for _, line := range []string{
		"name: 'prod: eu-1'\n", "\nn: 4\n", "\nf: 1\n", "\nquorum: 3\n", "\nscheme: Ed25519\n",
		"\nca: |\n  -----BEGIN CERTIFICATE-----\n",
		"\nservers:\n  - id: 0\n    address: 127.0.0.1:7400\n    signing_key: " + c.Servers[0].SigningKey.Wire.String() +
			"\n    endorse_keys: " + formatEndorseKeys(c.Servers[0].Endorse) + "\n    certificate: |\n      -----BEGIN CERTIFICATE-----\n",
	} {
		require.Contains(t, text, line)
	}
	require.True(t, strings.HasPrefix(text, "# bq cluster file."))
	// Every address is host:port.
	for _, s := range c.Servers {
		_, _, err := net.SplitHostPort(s.Address)
		require.NoError(t, err)
	}
}
