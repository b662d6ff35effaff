package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A closed cluster (docs/protocol.md change 23) with four real server
// processes: a key it never enrolled is refused with a message that says
// so (exit 7); `client add` enrolls a key (--out, and --pub for a key made
// with keygen), its lock-name patterns are enforced by every server (exit
// 7, naming the name and the patterns); `client list` shows the clients;
// `client revoke` makes a holder lose its lock (exit 4) and the identity
// is refused from then on, also after every server restarted.
func TestClosedCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	out, err := exec.Command(bin("bqserver"), "init", "--dir", dir, "--servers", "4",
		"--port-base", fmt.Sprint(freePortBase(t, 4))).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "The cluster is closed")
	st, err := os.Stat(filepath.Join(dir, "ca", "client-ca.key"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	servers := runServers(t, dir, 4)

	cluster := filepath.Join(dir, "cluster.yaml")
	work := t.TempDir()
	run := func(name string, args ...string) (string, int) {
		out, err := exec.Command(bin(name), args...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err, "%s", out)
		}
		return string(out), code
	}
	client := func(identity string, args ...string) (string, int) {
		return run("bqclient", append([]string{"--cluster", cluster, "--identity", filepath.Join(work, identity)}, args...)...)
	}

	// An unenrolled key: refused at once, with what to do.
	out2, code := client("stranger.key", "lock", "ci/1", "--", "true")
	require.Equal(t, 7, code, out2)
	require.Contains(t, out2, "is closed")
	require.Contains(t, out2, "no admission certificate")
	require.Contains(t, out2, "bqserver client add")

	// Enrolled with --out: a ready identity file, limited to ci/**.
	ci := filepath.Join(work, "ci.identity")
	out2, code = run("bqserver", "client", "add", "ci", "--dir", dir, "--out", ci, "--locks", "ci/**")
	require.Equal(t, 0, code, out2)
	out2, code = client("ci.identity", "lock", "ci/job-1", "--", "true")
	require.Equal(t, 0, code, out2)
	out2, code = client("ci.identity", "lock", "prod/db", "--", "true")
	require.Equal(t, 7, code, out2)
	require.Contains(t, out2, `may not use lock "prod/db"`)
	require.Contains(t, out2, "ci/**")

	// Enrolled with --pub: the private key stays with the client; the
	// certificate is appended to its identity file.
	out2, code = client("worker.key", "keygen", "--out", filepath.Join(work, "worker.key"))
	require.Equal(t, 0, code, out2)
	cert, code := run("bqserver", "client", "add", "worker", "--dir", dir, "--pub", filepath.Join(work, "worker.key.pub"))
	require.Equal(t, 0, code, cert)
	_, code = run("bqserver", "client", "add", "thief", "--dir", dir, "--pub", filepath.Join(work, "worker.key"))
	require.Equal(t, 1, code, "a private key file is refused as --pub")
	certPEM := cert[strings.Index(cert, "-----BEGIN"):]
	certPEM = certPEM[:strings.Index(certPEM, "-----END BQ ADMISSION CERTIFICATE-----\n")+len("-----END BQ ADMISSION CERTIFICATE-----\n")]
	f, err := os.OpenFile(filepath.Join(work, "worker.key"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(certPEM)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	out2, code = client("worker.key", "lock", "anything/at/all", "--", "true")
	require.Equal(t, 0, code, out2)

	out2, code = run("bqserver", "client", "list", "--dir", dir)
	require.Equal(t, 0, code, out2)
	require.Regexp(t, `(?m)^ci\s+\S+\s+ci/\*\*\s+\S+\s+enrolled$`, out2)
	require.Regexp(t, `(?m)^worker\s+\S+\s+every name\s+\S+\s+enrolled$`, out2)

	// Revoked while holding: the holder loses the lock (its command gets
	// SIGTERM, exit 4), and the identity is refused from then on.
	holder := start(t, "holder", nil, bin("bqclient"), "--cluster", cluster, "--identity", ci,
		"lock", "ci/long", "--ttl", "2s", "--", "sh", "-c", "echo holding; sleep 60 & wait")
	holder.waitFor(20*time.Second, 1, "holding")
	revokedAt := time.Now()
	out2, code = run("bqserver", "client", "revoke", "ci", "--dir", dir)
	require.Equal(t, 0, code, out2)
	require.Contains(t, out2, "acknowledged by 4 of 4 servers")
	require.Equal(t, 4, holder.waitExit(20*time.Second), holder.output())
	t.Logf("the holder lost its lock %v after the revocation", time.Since(revokedAt).Round(time.Millisecond))
	out2, code = client("ci.identity", "lock", "ci/job-2", "--", "true")
	require.Equal(t, 7, code, out2)
	require.Contains(t, out2, "revoked")
	out2, code = run("bqserver", "client", "list", "--dir", dir)
	require.Equal(t, 0, code, out2)
	require.Regexp(t, `(?m)^ci\s+.*revoked `, out2)

	// The revocation survives a restart of every server.
	for _, p := range servers {
		code, _ := p.stop(syscall.SIGTERM, 5*time.Second)
		require.Equal(t, 0, code)
	}
	runServers(t, dir, 4)
	out2, code = client("ci.identity", "lock", "ci/job-3", "--", "true")
	require.Equal(t, 7, code, out2)
	require.Contains(t, out2, "revoked")
	out2, code = client("worker.key", "lock", "w", "--", "true")
	require.Equal(t, 0, code, out2)
}
