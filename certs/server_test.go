package certs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func privateFile(dir string, id int, name string) string {
	return filepath.Join(ServerDir(dir, id), name)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, data, 0o600))
}

func TestLoadServerValidation(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(t *testing.T, dir, other string)
		id    int
		count int
		want  []string
	}{
		{"signing key of another server", func(t *testing.T, dir, _ string) {
			copyFile(t, privateFile(dir, 1, SigningKeyFile), privateFile(dir, 0, SigningKeyFile))
		}, 0, 1, []string{"server-0/signing.key: does not match the signing_key of server 0 in cluster.yaml", "another server or another cluster"}},
		{"TLS key of another server", func(t *testing.T, dir, _ string) {
			copyFile(t, privateFile(dir, 1, TLSKeyFile), privateFile(dir, 0, TLSKeyFile))
		}, 0, 1, []string{"server-0/tls.key: does not match the TLS certificate of server 0 in cluster.yaml", "another server or another cluster"}},
		{"tls.crt of another server", func(t *testing.T, dir, _ string) {
			copyFile(t, privateFile(dir, 1, TLSCertFile), privateFile(dir, 0, TLSCertFile))
		}, 0, 1, []string{"server-0/tls.crt: differs from server 0's certificate in cluster.yaml"}},
		{"cluster file of another cluster", func(t *testing.T, dir, other string) {
			copyFile(t, clusterPath(other), clusterPath(dir))
		}, 2, 4, []string{
			"server-2/tls.key: does not match the TLS certificate of server 2",
			"server-2/signing.key: does not match the signing_key of server 2",
			"server-2/tls.crt: differs",
			"another server or another cluster",
			"server-2/endorse.pub: wire: endorsement keys: the leaves are not of the root the epoch names",
		}},
		{"private directory of another cluster", func(t *testing.T, dir, other string) {
			require.NoError(t, os.RemoveAll(ServerDir(dir, 1)))
			require.NoError(t, os.Rename(ServerDir(other, 1), ServerDir(dir, 1)))
		}, 1, 4, []string{"server-1/tls.key: does not match", "server-1/signing.key: does not match", "server-1/tls.crt: differs", "server-1/endorse.pub: wire: endorsement keys"}},
		{"endorsement keys of another server", func(t *testing.T, dir, _ string) {
			copyFile(t, privateFile(dir, 1, EndorseKeyFile), privateFile(dir, 0, EndorseKeyFile))
		}, 0, 1, []string{"server-0/endorse.key", "the endorsement key state is not of these keys"}},
		{"endorsement key state readable by others", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.Chmod(privateFile(dir, 0, EndorseKeyFile), 0o644))
		}, 0, 1, []string{"endorse.key holds a private key but is accessible to group or others (mode 0644)"}},
		{"signing key readable by others", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.Chmod(privateFile(dir, 0, SigningKeyFile), 0o644))
		}, 0, 1, []string{"signing.key holds a private key but is accessible to group or others (mode 0644): run chmod 600 " + privateFile("DIR", 0, SigningKeyFile)}},
		{"TLS key readable by group", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.Chmod(privateFile(dir, 3, TLSKeyFile), 0o640))
		}, 3, 1, []string{"tls.key holds a private key but is accessible to group or others (mode 0640): run chmod 600"}},
		{"missing TLS key", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.Remove(privateFile(dir, 0, TLSKeyFile)))
		}, 0, 1, []string{"server-0/tls.key is missing", "copy the whole server-0 directory"}},
		{"missing signing key and certificate", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.Remove(privateFile(dir, 0, SigningKeyFile)))
			require.NoError(t, os.Remove(privateFile(dir, 0, TLSCertFile)))
		}, 0, 2, []string{"server-0/signing.key is missing", "server-0/tls.crt is missing"}},
		{"missing private directory", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.RemoveAll(ServerDir(dir, 2)))
		}, 2, 4, []string{"server-2/tls.key is missing", "server-2/signing.key is missing", "server-2/tls.crt is missing", "server-2/endorse.key is missing"}},
		{"unreadable signing key", func(t *testing.T, dir, _ string) {
			p := privateFile(dir, 0, SigningKeyFile)
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.Mkdir(p, 0o700))
		}, 0, 1, []string{"server-0/signing.key is not a regular file"}},
		{"garbage signing key", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.WriteFile(privateFile(dir, 0, SigningKeyFile), []byte("hello"), 0o600))
		}, 0, 1, []string{"server-0/signing.key: not a signing key file"}},
		{"signing key of an unknown scheme", func(t *testing.T, dir, _ string) {
			p := privateFile(dir, 0, SigningKeyFile)
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, []byte(strings.Replace(string(data), "Scheme: Ed25519", "Scheme: RSA", 1)), 0o600))
		}, 0, 1, []string{"server-0/signing.key: bad signing key", `unknown signature scheme "RSA"`}},
		{"garbage TLS key", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.WriteFile(privateFile(dir, 0, TLSKeyFile), []byte("-----BEGIN PRIVATE KEY-----\naGVsbG8=\n-----END PRIVATE KEY-----\n"), 0o600))
		}, 0, 1, []string{"server-0/tls.key: malformed PKCS#8 private key"}},
		{"TLS key with trailing data", func(t *testing.T, dir, _ string) {
			p := privateFile(dir, 0, TLSKeyFile)
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, append(data, "more"...), 0o600))
		}, 0, 1, []string{"server-0/tls.key: unexpected data after the PEM"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := newCluster(t)
			other, _ := newCluster(t)
			tc.edit(t, dir, other)
			m, err := LoadServer(dir, tc.id)
			require.Nil(t, m)
			want := make([]string, len(tc.want))
			for i, w := range tc.want {
				want[i] = strings.ReplaceAll(w, "DIR", dir)
			}
			requireProblems(t, err, tc.count, want...)
			// The other servers are unaffected.
			for id := range 4 {
				if id != tc.id && !strings.Contains(tc.name, "cluster file") {
					_, err := LoadServer(dir, id)
					require.NoError(t, err, "server %d", id)
				}
			}
		})
	}
}

func TestLoadServerIDOutOfRange(t *testing.T) {
	dir, _ := newCluster(t)
	for _, id := range []int{-1, 4, 1000} {
		_, err := LoadServer(dir, id)
		require.ErrorContains(t, err, "out of range")
		require.ErrorContains(t, err, "servers 0..3")
	}
}

func TestLoadServerNoCluster(t *testing.T) {
	_, err := LoadServer(t.TempDir(), 0)
	require.ErrorContains(t, err, "cluster.yaml does not exist")
}
