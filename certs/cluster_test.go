package certs

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// newCluster makes a 4-server Ed25519 cluster in a new directory.
func newCluster(t *testing.T) (string, *Cluster) {
	t.Helper()
	return newClusterWith(t, InitOptions{Servers: 4, F: 1})
}

func newClusterWith(t *testing.T, opts InitOptions) (string, *Cluster) {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = filepath.Join(t.TempDir(), "cluster")
	}
	c, err := Init(opts, time.Now(), rand.Reader)
	require.NoError(t, err)
	return opts.Dir, c
}

func clusterPath(dir string) string { return filepath.Join(dir, ClusterFileName) }

// problemsOf returns the individual problems of a (joined) load error.
func problemsOf(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// requireProblems checks that err reports exactly count problems and mentions every substring.
func requireProblems(t *testing.T, err error, count int, substrings ...string) {
	t.Helper()
	require.Error(t, err)
	require.Len(t, problemsOf(err), count, "problems reported:\n%v", err)
	for _, s := range substrings {
		require.Contains(t, err.Error(), s)
	}
}

func readClusterFile(t *testing.T, dir string) *clusterFile {
	t.Helper()
	data, err := os.ReadFile(clusterPath(dir))
	require.NoError(t, err)
	var cf clusterFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&cf))
	return &cf
}

func writeClusterFile(t *testing.T, dir string, cf *clusterFile) {
	t.Helper()
	data, err := yaml.Marshal(cf)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(clusterPath(dir), data, 0o644))
}

func editCluster(t *testing.T, dir string, edit func(cf *clusterFile)) {
	t.Helper()
	cf := readClusterFile(t, dir)
	edit(cf)
	writeClusterFile(t, dir, cf)
}

func intp(i int) *int { return &i }

func TestInitLoadRoundTrip(t *testing.T) {
	for _, scheme := range crypto.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			dir, made := newClusterWith(t, InitOptions{Servers: 4, F: 1, Scheme: scheme, Name: "test " + scheme, PortBase: 9000})
			c, err := LoadCluster(clusterPath(dir))
			require.NoError(t, err)
			require.Equal(t, "test "+scheme, c.Name)
			require.Equal(t, scheme, c.Scheme)
			require.Equal(t, 4, c.N)
			require.Equal(t, 1, c.F)
			require.Equal(t, 3, c.Quorum)
			require.True(t, made.CA.Equal(c.CA))
			require.Len(t, c.Servers, 4)
			keys := c.Keyring()
			require.Equal(t, 4, keys.Len())
			for i, s := range c.Servers {
				require.Equal(t, wire.ServerID(i), s.ID)
				require.Equal(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(9000+i)), s.Address)
				require.Equal(t, scheme, s.SigningKey.Wire.Scheme)
				require.Equal(t, made.Servers[i].SigningKey.ID, s.SigningKey.ID)
				require.True(t, made.Servers[i].Cert.Equal(s.Cert))
				require.Equal(t, ServerCommonName(i), s.Cert.Subject.CommonName)
				require.Same(t, s.SigningKey, keys.Key(s.ID))
				id, ok := c.ServerByCert(s.Cert)
				require.True(t, ok)
				require.Equal(t, s.ID, id)
				_, err := s.Cert.Verify(x509.VerifyOptions{Roots: c.CAPool(), DNSName: "localhost",
					KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
				require.NoError(t, err)
				require.NoError(t, s.Cert.VerifyHostname("127.0.0.1"))
			}
			require.Equal(t, map[wire.ServerID]string{0: "127.0.0.1:9000", 1: "127.0.0.1:9001", 2: "127.0.0.1:9002", 3: "127.0.0.1:9003"}, c.Addresses())

			for i := range 4 {
				m, err := LoadServer(dir, i)
				require.NoError(t, err)
				require.Equal(t, wire.ServerID(i), m.ID)
				require.Equal(t, filepath.Join(dir, "server-"+strconv.Itoa(i)), m.Dir)
				require.Same(t, m.Cluster.Servers[i].Cert, m.TLS.Leaf)
				require.Equal(t, m.Cluster.Servers[i].SigningKey.ID, m.SigningKey.Public.ID)
				// The signing key signs what the cluster's keyring verifies, for this id only.
				sig := m.SigningKey.Sign(crypto.DomainTest, []byte("hello"))
				require.True(t, m.Cluster.Keyring().Key(m.ID).Verify(crypto.DomainTest, []byte("hello"), sig))
				require.False(t, m.Cluster.Keyring().Key(wire.ServerID((i+1)%4)).Verify(crypto.DomainTest, []byte("hello"), sig))
			}
		})
	}
}

// The material of two servers completes a mutual-TLS handshake under the
// cluster CA, and each side identifies the other with ServerByCert.
func TestServerMaterialMutualTLS(t *testing.T) {
	dir, _ := newCluster(t)
	a, err := LoadServer(dir, 0)
	require.NoError(t, err)
	b, err := LoadServer(dir, 1)
	require.NoError(t, err)

	cConn, sConn := net.Pipe()
	defer cConn.Close()
	defer sConn.Close()
	srv := tls.Server(sConn, &tls.Config{
		Certificates: []tls.Certificate{b.TLS}, ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs: b.Cluster.CAPool(), MinVersion: tls.VersionTLS13,
	})
	cli := tls.Client(cConn, &tls.Config{
		Certificates: []tls.Certificate{a.TLS}, RootCAs: a.Cluster.CAPool(),
		ServerName: "localhost", MinVersion: tls.VersionTLS13,
	})
	done := make(chan error, 1)
	go func() { done <- srv.Handshake() }()
	require.NoError(t, cli.Handshake())
	require.NoError(t, <-done)

	id, ok := a.Cluster.ServerByCert(cli.ConnectionState().PeerCertificates[0])
	require.True(t, ok)
	require.Equal(t, wire.ServerID(1), id)
	id, ok = b.Cluster.ServerByCert(srv.ConnectionState().PeerCertificates[0])
	require.True(t, ok)
	require.Equal(t, wire.ServerID(0), id)
}

func TestServerByCertRejectsOtherCertificates(t *testing.T) {
	dir, c := newCluster(t)
	_, other := newCluster(t)
	_, ok := c.ServerByCert(other.Servers[0].Cert) // same name, another cluster
	require.False(t, ok)
	_, ok = c.ServerByCert(nil)
	require.False(t, ok)
	// A certificate the cluster CA issued for id 0 but that is not the
	// cluster file's is not server 0.
	ca, err := LoadCA(dir)
	require.NoError(t, err)
	der, _, err := ca.IssueServer(0, []string{"127.0.0.1"}, time.Now(), rand.Reader)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	_, ok = c.ServerByCert(cert)
	require.False(t, ok)
}

func TestLoadClusterValidation(t *testing.T) {
	other, otherCluster := newCluster(t)
	_ = other
	mldsa, err := crypto.GenerateKey(crypto.MLDSA44, rand.Reader)
	require.NoError(t, err)

	cases := []struct {
		name  string
		edit  func(t *testing.T, dir string, cf *clusterFile)
		count int
		want  []string
	}{
		{"n below 3f+1", func(t *testing.T, dir string, cf *clusterFile) {
			cf.N = intp(3)
			cf.Servers = cf.Servers[:3]
		}, 1, []string{"n=3", "f=1", "3f+1 = 4"}},
		{"n differs from the entries", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers = cf.Servers[:3]
		}, 1, []string{"n is 4 but there are 3 server entries"}},
		{"quorum wrong", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Quorum = intp(2)
		}, 1, []string{"quorum: 2 is wrong", "set quorum: 3"}},
		{"quorum missing", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Quorum = nil
		}, 1, []string{"quorum: missing"}},
		{"n missing", func(t *testing.T, dir string, cf *clusterFile) {
			cf.N = nil
		}, 1, []string{"n: missing"}},
		{"negative f", func(t *testing.T, dir string, cf *clusterFile) {
			cf.F = intp(-1)
		}, 1, []string{"f: -1 is negative"}},
		{"no name", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Name = ""
		}, 1, []string{"name: missing"}},
		{"id out of range", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[3].ID = intp(7)
		}, 1, []string{"servers[3] (id 7)", "out of range", "0..3"}},
		{"negative id", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[3].ID = intp(-1)
		}, 1, []string{"id -1 is out of range"}},
		{"duplicate id", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[3].ID = intp(2)
		}, 1, []string{"servers[3] (id 2)", "also the id of servers[2]"}},
		{"missing id", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[3].ID = nil
		}, 1, []string{"servers[3]: id missing"}},
		{"duplicate address", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[2].Address = cf.Servers[0].Address
		}, 1, []string{"servers[2] (id 2): address 127.0.0.1:7400 is also the address of servers[0]"}},
		{"duplicate address, other spelling", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[2].Address = "LOCALHOST:7401"
			cf.Servers[1].Address = "localhost:07401"
		}, 1, []string{"also the address of servers[1]"}},
		{"address without port", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[1].Address = "127.0.0.1"
		}, 1, []string{`servers[1] (id 1): address "127.0.0.1": must be host:port`}},
		{"address with a bad port", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[1].Address = "127.0.0.1:70000"
		}, 1, []string{`port "70000" is not a port number`}},
		{"address without host", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[1].Address = ":7401"
		}, 1, []string{"has no host"}},
		{"address not covered by the certificate", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[1].Address = "10.1.2.3:7401"
		}, 1, []string{"servers[1] (id 1): certificate is for 127.0.0.1, localhost", "does not include the address host 10.1.2.3"}},
		{"unparsable signing key", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[1].SigningKey = "not a key"
		}, 1, []string{"servers[1] (id 1): signing_key", "SCHEME:BASE64URL"}},
		{"truncated signing key", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[1].SigningKey = cf.Servers[1].SigningKey[:20]
		}, 1, []string{"servers[1] (id 1): signing_key", "Ed25519 public key has"}},
		{"unknown-scheme signing key", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[1].SigningKey = "RSA:" + strings.SplitN(cf.Servers[1].SigningKey, ":", 2)[1]
		}, 1, []string{"servers[1] (id 1): signing_key", `unknown signature scheme "RSA"`}},
		{"signing key of another scheme", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[1].SigningKey = mldsa.Public.Wire.String()
		}, 1, []string{"signing_key is a ML-DSA-44 key but the cluster's scheme is Ed25519"}},
		{"duplicate signing key", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[3].SigningKey = cf.Servers[0].SigningKey
		}, 1, []string{"servers[3] (id 3): signing_key is also the signing key of servers[0] (id 0)"}},
		{"unknown cluster scheme", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Scheme = "RSA"
		}, 1, []string{"scheme:", `unknown signature scheme "RSA"`}},
		{"certificate from another cluster's CA", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[1].Certificate = certPEM(otherCluster.Servers[1].Cert.Raw)
		}, 1, []string{"servers[1] (id 1): certificate: not issued by the cluster CA"}},
		{"certificate of another server", func(t *testing.T, dir string, cf *clusterFile) {
			ca, err := LoadCA(dir)
			require.NoError(t, err)
			der, _, err := ca.IssueServer(5, []string{"127.0.0.1"}, time.Now(), rand.Reader)
			require.NoError(t, err)
			cf.Servers[1].Certificate = certPEM(der)
		}, 1, []string{"servers[1] (id 1): certificate: its common name is \"bq-server-5\", not \"bq-server-1\""}},
		{"two servers with one certificate", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[1].Certificate = cf.Servers[0].Certificate
		}, 2, []string{"common name is \"bq-server-0\"", "same TLS key as the certificate of servers[0] (id 0)"}},
		{"certificate that is not PEM", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers[1].Certificate = "hello"
		}, 1, []string{"servers[1] (id 1): certificate: no PEM"}},
		{"CA that is not PEM", func(t *testing.T, dir string, cf *clusterFile) {
			cf.CA = "hello"
		}, 1, []string{"ca: no PEM"}},
		{"CA that is not a CA", func(t *testing.T, dir string, cf *clusterFile) {
			cf.CA = cf.Servers[0].Certificate
		}, 1, []string{"ca: the certificate \"bq-server-0\" is not a CA certificate"}},
		{"no servers", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Servers = nil
		}, 1, []string{"servers: no server entries"}},
		{"unparsable approver", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Approver = "not a key"
		}, 1, []string{"approver:", "SCHEME:BASE64URL"}},
		{"approver of a closed cluster", func(t *testing.T, dir string, cf *clusterFile) {
			cf.ClientCA = mldsa.Public.Wire.String()
		}, 1, []string{"approver: a closed cluster's changes are approved with its client CA's key"}},
		{"approver that is a server's signing key", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Approver = cf.Servers[2].SigningKey
		}, 1, []string{"servers[2] (id 2): signing_key is the approver's key"}},
		{"two problems, two errors", func(t *testing.T, dir string, cf *clusterFile) {
			cf.Quorum = intp(4)
			cf.Servers[2].Address = cf.Servers[0].Address
		}, 2, []string{"quorum: 4 is wrong", "also the address of servers[0]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := newCluster(t)
			editCluster(t, dir, func(cf *clusterFile) { tc.edit(t, dir, cf) })
			c, err := LoadCluster(clusterPath(dir))
			require.Nil(t, c)
			requireProblems(t, err, tc.count, tc.want...)
			require.Contains(t, err.Error(), clusterPath(dir), "every problem names the file")
			for _, p := range problemsOf(err) {
				require.True(t, strings.HasPrefix(p.Error(), "certs: "+clusterPath(dir)+": "), "%q", p)
			}
			// LoadServer reports the same problems and nothing else.
			_, err2 := LoadServer(dir, 0)
			require.Equal(t, err.Error(), err2.Error())
		})
	}
}

func TestLoadClusterHandEditedNAndF(t *testing.T) {
	dir, _ := newCluster(t)
	data, err := os.ReadFile(clusterPath(dir))
	require.NoError(t, err)
	edited := strings.Replace(string(data), "\nn: 4\n", "\nn: 3\n", 1)
	require.NotEqual(t, string(data), edited)
	require.NoError(t, os.WriteFile(clusterPath(dir), []byte(edited), 0o644))
	_, err = LoadCluster(clusterPath(dir))
	// Two problems: n=3 cannot tolerate f=1, and n no longer counts the entries.
	requireProblems(t, err, 2, "n=3 servers cannot tolerate f=1", "need n ≥ 3f+1 = 4", "n is 3 but there are 4 server entries")
}

func TestLoadClusterUnknownField(t *testing.T) {
	dir, _ := newCluster(t)
	data, err := os.ReadFile(clusterPath(dir))
	require.NoError(t, err)
	data = bytes.Replace(data, []byte("\nquorum: 3\n"), []byte("\nquorum: 3\nquorom: 3\n"), 1)
	data = bytes.Replace(data, []byte("    address: 127.0.0.1:7401\n"), []byte("    address: 127.0.0.1:7401\n    port: 7401\n"), 1)
	require.NoError(t, os.WriteFile(clusterPath(dir), data, 0o644))
	_, err = LoadCluster(clusterPath(dir))
	require.Error(t, err)
	require.Contains(t, err.Error(), "field quorom not found")
	require.Contains(t, err.Error(), "field port not found")
	require.Contains(t, err.Error(), clusterPath(dir))
}

func TestLoadClusterNotYAML(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(clusterPath(dir), []byte("name: [unclosed\n"), 0o644))
	_, err := LoadCluster(clusterPath(dir))
	require.ErrorContains(t, err, "not a valid cluster file")

	require.NoError(t, os.WriteFile(clusterPath(dir), []byte("name: a\n---\nname: b\n"), 0o644))
	_, err = LoadCluster(clusterPath(dir))
	require.ErrorContains(t, err, "more than one YAML document")

	require.NoError(t, os.WriteFile(clusterPath(dir), []byte("# nothing\n"), 0o644))
	_, err = LoadCluster(clusterPath(dir))
	require.ErrorContains(t, err, "the cluster file is empty")

	_, err = LoadCluster(filepath.Join(dir, "nothing.yaml"))
	require.ErrorContains(t, err, "does not exist")
	require.ErrorContains(t, err, "bqserver init")
}

// The cluster file's dates that count are the cluster CA's (the one in
// force): its servers' certificates are the first members', which epochs
// may have replaced since; a member's own expired certificate keeps that
// member from starting (LoadServer), not the cluster from loading.
func TestLoadClusterTimes(t *testing.T) {
	dir, _ := newCluster(t)
	// After the servers' certificates expire (the CA lives longer).
	later := time.Now().Add(ServerValidity + 24*time.Hour)
	_, err := loadCluster(clusterPath(dir), later)
	require.NoError(t, err, "the first members' certificates are not the cluster's")
	_, err = loadServer(dir, 2, later)
	require.ErrorContains(t, err, "server 2's TLS certificate expired on")
	require.ErrorContains(t, err, "bqserver server replace 2 --dir DIR")
	_, err = loadServer(dir, 2, time.Now())
	require.NoError(t, err)
	// After the CA expires, the CA is the one problem.
	_, err = loadCluster(clusterPath(dir), time.Now().Add(CAValidity+24*time.Hour))
	requireProblems(t, err, 1, "ca: the cluster CA certificate expired on")
	// Before the certificates are valid (a clock far behind).
	_, err = loadCluster(clusterPath(dir), time.Now().Add(-48*time.Hour))
	requireProblems(t, err, 1, "ca: the cluster CA certificate is not valid before", "clock")
}

func TestLoadClusterServerOrderDoesNotMatter(t *testing.T) {
	dir, made := newCluster(t)
	editCluster(t, dir, func(cf *clusterFile) {
		cf.Servers[0], cf.Servers[3] = cf.Servers[3], cf.Servers[0]
	})
	c, err := LoadCluster(clusterPath(dir))
	require.NoError(t, err)
	for i, s := range c.Servers {
		require.Equal(t, wire.ServerID(i), s.ID)
		require.True(t, made.Servers[i].Cert.Equal(s.Cert))
	}
}

func TestLoadCA(t *testing.T) {
	dir, c := newCluster(t)
	ca, err := LoadCA(dir)
	require.NoError(t, err)
	require.True(t, ca.Cert.Equal(c.CA))

	// The CA key of another cluster is refused.
	other, _ := newCluster(t)
	key, err := os.ReadFile(filepath.Join(other, CADirName, CAKeyFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, CADirName, CAKeyFile), key, 0o600))
	_, err = LoadCA(dir)
	require.ErrorContains(t, err, "is not the key of the cluster CA")
}

// failingReader fails after n bytes.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("entropy ran out")
	}
	k := min(len(p), r.n)
	r.n -= k
	return rand.Read(p[:k])
}

var _ io.Reader = (*failingReader)(nil)
