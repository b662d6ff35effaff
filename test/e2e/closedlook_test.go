package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// On the default (closed) cluster, with four real server processes
// (issue: the closed cluster is the default, so everything must work on it):
// status, status LOCK and elect --leader (exit 3: no leader) work with the
// user's enrolled identity while a bqclient lock of that same identity holds
// the lock — which is not disturbed — and name the holder by its enrolled
// name; an unenrolled identity is refused as before (exit 7); the operator's
// bqserver status --dir needs no identity; a max-hold too short for the
// TTL is refused up front (exit 6), and too short for any is refused at
// enrolment (exit 2).
func TestLookingOnAClosedCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	out, code := runCLI(t, "bqserver", "init", "--dir", dir, "--servers", "4", "--port-base", fmt.Sprint(freePortBase(t, 4)))
	require.Equal(t, 0, code, out)
	runServers(t, dir, 4)
	cluster := filepath.Join(dir, "cluster.yaml")
	work := t.TempDir()
	bob := filepath.Join(work, "bob.id")
	out, code = runCLI(t, "bqserver", "client", "add", "bob", "--dir", dir, "--out", bob)
	require.Equal(t, 0, code, out)
	as := func(identity string, args ...string) (string, int) {
		return runCLI(t, "bqclient", append([]string{"--cluster", cluster, "--identity", identity}, args...)...)
	}

	holder := start(t, "holder", nil, bin("bqclient"), "--cluster", cluster, "--identity", bob,
		"lock", "deploy", "--ttl", "1s", "--", "sh", "-c", "echo holding; sleep 60 & wait")
	holder.waitFor(20*time.Second, 1, "holding")

	for began := time.Now(); time.Since(began) < 3*time.Second; { // three TTLs of looking
		out, code = as(bob, "status", "deploy")
		require.Equal(t, 0, code, out)
		require.Regexp(t, `(?m)^  holders: 1\n +bob \([0-9a-f]{16}\) exclusive, token=`, out)
		out, code = as(bob, "status")
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "lock deploy: 1 member(s)")
		// The lock is held by a plain lock, which proclaims no value: the
		// election has no leader, exit 3 (README, cmd/bqclient/exit.go). Not 7:
		// elect --leader reads on a closed cluster with an enrolled identity.
		out, code = as(bob, "elect", "deploy", "--leader")
		require.Equal(t, 3, code, "elect --leader with a holder that proclaimed nothing: no leader: %s", out)
		require.Contains(t, out, "holds the lock but has not proclaimed a value")
	}
	require.NotContains(t, holder.output(), "lost", "looking with the holder's own identity disturbed it")
	select {
	case <-holder.done:
		t.Fatalf("the holder ended while its identity looked:\n%s", holder.output())
	default:
	}

	out, code = runCLI(t, "bqserver", "status", "--dir", dir, "deploy")
	require.Equal(t, 0, code, out)
	require.Regexp(t, `(?m)^  holders: 1\n +bob \([0-9a-f]{16}\) exclusive, token=`, out)
	require.Contains(t, out, `client "bob" admission`)
	require.Contains(t, out, "settings: the defaults")

	out, code = as(bob, "status")
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, "note:", "nothing ends within 30 days")

	// An identity whose certificate ends within 30 days hears it from status.
	soon := filepath.Join(work, "soon.id")
	out, code = runCLI(t, "bqserver", "client", "add", "soon", "--dir", dir, "--out", soon, "--valid-for", "240h")
	require.Equal(t, 0, code, out)
	out, code = as(soon, "status")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `note: this identity's admission certificate ("soon") expires in 9 days`)
	require.Contains(t, out, "bqserver client renew soon")

	out, code = as(filepath.Join(work, "stranger.key"), "keygen", "--out", filepath.Join(work, "stranger.key"))
	require.Equal(t, 0, code, out)
	out, code = as(filepath.Join(work, "stranger.key"), "status", "deploy")
	require.Equal(t, 7, code, out)
	require.Contains(t, out, "no admission certificate")
	out, code = as(filepath.Join(work, "nobody.key"), "status")
	require.Equal(t, 7, code, out)
	require.Contains(t, out, "closed: looking needs an enrolled identity")
	_, err := os.Stat(filepath.Join(work, "nobody.key"))
	require.ErrorIs(t, err, os.ErrNotExist, "a look creates no identity")

	// Max-hold and TTL (change 24).
	out, code = runCLI(t, "bqserver", "client", "add", "tiny", "--dir", dir, "--out", filepath.Join(work, "tiny.id"), "--max-hold", "500ms")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "too short")
	short := filepath.Join(work, "short.id")
	out, code = runCLI(t, "bqserver", "client", "add", "short", "--dir", dir, "--out", short, "--max-hold", "3s")
	require.Equal(t, 0, code, out)
	out, code = as(short, "lock", "long", "--ttl", "1m", "--", "sh", "-c", "echo ran")
	require.Equal(t, 6, code, out)
	require.NotContains(t, out, "ran", "the command never starts")
	require.Contains(t, out, "use --ttl 6.75s or less")
	out, code = as(short, "lock", "long", "--ttl", "2s", "--", "sh", "-c", "echo ran")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "ran")
	// Without --ttl, the default (10s) does not fit: one that does is taken.
	out, code = as(short, "lock", "long", "--", "sh", "-c", "echo ran")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "taking a lease TTL of 6.75s, which fits it; a holding is given up 1.5s after it is taken (CMD gets SIGTERM then")
	require.Contains(t, out, "ran")
	// And it is: CMD that would run on is stopped 1.5 s after the lock
	// is taken (issue 55: the README now says when and why), exit 4.
	began := time.Now()
	out, code = as(short, "lock", "long", "--", "sh", "-c", "echo ran; sleep 30 & wait")
	took := time.Since(began)
	require.Equal(t, 4, code, out)
	require.Contains(t, out, "held for the max-hold the servers apply (3s)")
	require.Greater(t, took, 1500*time.Millisecond, "not before the max-hold less its margin")
	require.Less(t, took, 3*time.Second, "before the max-hold itself")
	t.Logf("CMD under a 3s max-hold, --ttl 6.75s: bqclient ended after %v", took.Round(time.Millisecond))
}

// bqserver dev on a directory that a plain bqserver init made (closed):
// it enrolls its self-check, writes DIR/dev.id and suggests it, and that
// identity works.
func TestDevOnAClosedClusterDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	out, code := runCLI(t, "bqserver", "init", "--dir", dir, "--servers", "4", "--port-base", fmt.Sprint(freePortBase(t, 4)))
	require.Equal(t, 0, code, out)
	p := start(t, "dev", nil, bin("bqserver"), "dev", "--dir", dir)
	p.waitFor(30*time.Second, 1, "self-check: took lock", "press Ctrl-C")
	id := filepath.Join(dir, "dev.id")
	require.Contains(t, p.output(), "export BQ_IDENTITY="+id)
	out, code = runCLI(t, "bqclient", "--cluster", filepath.Join(dir, "cluster.yaml"), "--identity", id, "lock", "demo", "--", "true")
	require.Equal(t, 0, code, out)
	out, code = runCLI(t, "bqclient", "--cluster", filepath.Join(dir, "cluster.yaml"), "--identity", id, "status")
	require.Equal(t, 0, code, out)
}
