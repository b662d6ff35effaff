package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The door of a closed cluster as a user meets it, with four real server
// processes (docs/protocol.md change 23): an enrolled client's certificate
// shown with another key, and an expired certificate, are refused with exit
// 7 and a message that says which; a certificate that expires while its
// holder holds a lock ends the holding (exit 4: the servers close the
// connection and refuse its lease, and the next client enters).
func TestDoorAsAUserMeetsIt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	out, code := runCLI(t, "bqserver", "init", "--dir", dir, "--servers", "4", "--port-base", fmt.Sprint(freePortBase(t, 4)))
	require.Equal(t, 0, code, out)
	runServers(t, dir, 4)
	cluster := filepath.Join(dir, "cluster.yaml")
	work := t.TempDir()
	as := func(identity string, args ...string) (string, int) {
		return runCLI(t, "bqclient", append([]string{"--cluster", cluster, "--identity", filepath.Join(work, identity)}, args...)...)
	}

	// bob's certificate, appended to mallory's own key.
	out, code = runCLI(t, "bqserver", "client", "add", "bob", "--dir", dir, "--out", filepath.Join(work, "bob.id"))
	require.Equal(t, 0, code, out)
	out, code = as("mallory.key", "keygen", "--out", filepath.Join(work, "mallory.key"))
	require.Equal(t, 0, code, out)
	bobID, err := os.ReadFile(filepath.Join(work, "bob.id"))
	require.NoError(t, err)
	cert := string(bobID[strings.Index(string(bobID), "-----BEGIN BQ ADMISSION CERTIFICATE-----"):])
	f, err := os.OpenFile(filepath.Join(work, "mallory.key"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(cert)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	out, code = as("mallory.key", "lock", "x", "--", "true")
	require.Equal(t, 7, code, out)
	require.Contains(t, out, `("bob") is for another key`)
	out, code = as("mallory.key", "status", "x")
	require.Equal(t, 7, code, out)

	// An expired certificate.
	out, code = runCLI(t, "bqserver", "client", "add", "brief", "--dir", dir, "--out", filepath.Join(work, "brief.id"), "--valid-for", "1ms")
	require.Equal(t, 0, code, out)
	out, code = as("brief.id", "lock", "x", "--", "true")
	require.Equal(t, 7, code, out)
	require.Contains(t, out, "expired")
	require.Contains(t, out, "ask the cluster's operator for a new one (bqserver client renew brief)")
	// The operator renews it (same key): the client is back, no server restarted.
	out, code = runCLI(t, "bqserver", "client", "list", "--dir", dir)
	require.Equal(t, 0, code, out)
	require.Regexp(t, `(?m)^brief\s+.*expired: bqserver client renew brief$`, out)
	out, code = runCLI(t, "bqserver", "client", "renew", "brief", "--dir", dir, "--identity", filepath.Join(work, "bob.id"))
	require.Equal(t, 1, code, "another client's identity file is not touched: %s", out)
	require.Contains(t, out, "nothing renewed")
	out, code = runCLI(t, "bqserver", "client", "renew", "brief", "--dir", dir, "--identity", filepath.Join(work, "brief.id"))
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `renewed "brief"`)
	out, code = as("brief.id", "lock", "x", "--", "true")
	require.Equal(t, 0, code, out)

	// A certificate that expires while its holder holds: the servers close
	// its connections and refuse it, so its lease runs out.
	out, code = runCLI(t, "bqserver", "client", "add", "short", "--dir", dir, "--out", filepath.Join(work, "short.id"), "--valid-for", "4s")
	require.Equal(t, 0, code, out)
	out, code = runCLI(t, "bqserver", "client", "add", "next", "--dir", dir, "--out", filepath.Join(work, "next.id"))
	require.Equal(t, 0, code, out)
	holder := start(t, "holder", nil, bin("bqclient"), "--cluster", cluster, "--identity", filepath.Join(work, "short.id"),
		"lock", "x", "--ttl", "1s", "--", "sh", "-c", "echo holding; sleep 60 & wait")
	holder.waitFor(20*time.Second, 1, "holding")
	waiter := start(t, "waiter", nil, bin("bqclient"), "--cluster", cluster, "--identity", filepath.Join(work, "next.id"),
		"lock", "x", "--", "sh", "-c", "echo next-in")
	// The window ends 4 s after enrolment.
	require.Equal(t, 4, holder.waitExit(20*time.Second), holder.output())
	require.Equal(t, 0, waiter.waitExit(20*time.Second), waiter.output())
	require.Contains(t, waiter.output(), "next-in")
}
