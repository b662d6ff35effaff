//go:build linux

package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bq-lock/bq/internal/testutil"
	"github.com/stretchr/testify/require"
)

// TestFullDiskServer fills the file system of one of four real servers
// while bqclient loops use the cluster (issue 27, point 4; README "What it
// promises": a full or failing disk holds every reply rather than
// acknowledge what a crash could lose). Server 3's directory is a small
// tmpfs with a WAL of 256 KiB (the wal_size setting); a filler file takes
// every byte left, and a loop taking a new lock name each time makes the
// servers' state grow until server 3's checkpoint cannot grow its database
// and its WAL has no room left.
//
//   - The full server logs it; the other three carry on (the loops keep
//     acquiring).
//   - It acknowledges nothing it could lose: with server 0 killed as well,
//     a lock finds no quorum and times out.
//   - Space freed, it sends the replies it held and serves again: with
//     server 0 down every quorum needs it, and new loops acquire.
//   - Full again, killed with kill -9 while full, space freed, restarted:
//     it recovers what it had acknowledged from its WAL and, with server 0
//     down again, serves.
//
// Throughout, the loops' mkdir probe and fencing tokens check that no two
// holders overlapped and tokens grew. It mounts a tmpfs, so it needs root.

func TestFullDiskServer(t *testing.T) {
	const holding = "cannot persist; holding every reply until the disk accepts writes again"
	dir := initCluster(t, 4)
	mnt := filepath.Join(dir, "server-3")
	mountSmallDisk(t, mnt, 2<<20)
	conf := filepath.Join(t.TempDir(), "server-3.yaml")
	require.NoError(t, os.WriteFile(conf, []byte("wal_size: 256KiB\n"), 0o600))

	servers := make([]*proc, 4)
	runServer := func(i int, name string) {
		args := []string{bin("bqserver"), "run", "--dir", dir, "--id", fmt.Sprint(i)}
		if i == 3 {
			args = append(args, "--config", conf)
		}
		servers[i] = start(t, name, nil, args...)
	}
	for i := range servers {
		runServer(i, fmt.Sprintf("s%d", i))
	}
	for _, p := range servers {
		p.waitFor(20*time.Second, 3, "accepted server connection")
	}

	// Each phase runs lock loops (a mkdir probe and fencing tokens check
	// that no two holders overlap and tokens grow) and a growth loop that
	// takes a new lock name each time: it leaves a fencing high-water mark
	// behind on every server, so their state only grows.
	type phase struct {
		stop, grown string
		loops       *lockLoops
		grow        *proc
	}
	run := func(name string) *phase {
		work := t.TempDir()
		ph := &phase{stop: filepath.Join(work, "stop"), grown: filepath.Join(work, "grown")}
		ph.loops = startLockLoops(t, dir, "disk", 2, fmt.Sprintf("while [ ! -e '%s' ]", ph.stop), "--timeout", "60s", "--ttl", "2s")
		ph.grow = start(t, "grow-"+name, []string{"BQ_IDENTITY=" + filepath.Join(work, "grow.key")}, "sh", "-c", fmt.Sprintf(
			`i=0; while [ ! -e '%s' ]; do i=$((i+1)); '%s' --cluster '%s' lock "grow-%s-$i" --timeout 60s -- true || exit $?; echo $i >> '%s'; done`,
			ph.stop, bin("bqclient"), filepath.Join(dir, "cluster.yaml"), name, ph.grown))
		return ph
	}
	progress := func(ph *phase, what string, n int) {
		t.Helper()
		h0, g0 := ph.loops.holdings(), countLines(ph.grown)
		waitUntil(t, 60*time.Second, func() bool { return ph.loops.holdings() >= h0+n && countLines(ph.grown) >= g0+n })
		t.Logf("%s: %d more holdings, %d more new locks", what, ph.loops.holdings()-h0, countLines(ph.grown)-g0)
	}
	end := func(ph *phase) {
		t.Helper()
		require.NoError(t, os.WriteFile(ph.stop, nil, 0o600))
		ph.loops.wait(90 * time.Second)
		require.Equal(t, 0, ph.grow.waitExit(90*time.Second), "the growth loop:\n%s", ph.grow.output())
		ph.loops.checkTokens()
	}

	ph := run("full")
	progress(ph, "all four servers", 5)
	// Full: the server logs that it holds its replies, the others serve.
	filler := fill(t, mnt)
	servers[3].waitFor(2*time.Minute, 1, holding)
	progress(ph, "server 3's disk full", 20)
	end(ph)

	// It acknowledges nothing it could lose: with server 0 gone as well,
	// no quorum is left and a lock times out (exit 5).
	require.NoError(t, servers[0].cmd.Process.Signal(syscall.SIGKILL))
	<-servers[0].done
	probe := start(t, "probe", []string{"BQ_IDENTITY=" + filepath.Join(t.TempDir(), "probe.key")},
		bin("bqclient"), "--cluster", filepath.Join(dir, "cluster.yaml"), "lock", "probe", "--timeout", "3s", "--", "true")
	require.Equal(t, 5, probe.waitExit(30*time.Second), "a lock with server 0 down and server 3's disk full:\n%s", probe.output())

	// Space freed: it sends the replies it held and serves again; with
	// server 0 down every quorum needs it.
	require.NoError(t, os.Remove(filler))
	servers[3].waitFor(30*time.Second, 1, "the disk accepts writes again: sending the replies held")
	ph = run("freed")
	progress(ph, "server 3 freed, server 0 down", 10)

	end(ph)

	// Full again (server 0 back so that the cluster serves meanwhile),
	// killed while full, freed, restarted from its WAL: with server 0 down
	// again it serves.
	runServer(0, "s0-restarted")
	servers[0].waitFor(20*time.Second, 1, "server started")
	ph = run("again")
	before := strings.Count(servers[3].output(), holding)
	filler = fill(t, mnt)
	servers[3].waitFor(2*time.Minute, before+1, holding)
	progress(ph, "server 3's disk full again", 10)
	end(ph)
	for _, i := range []int{3, 0} {
		require.NoError(t, servers[i].cmd.Process.Signal(syscall.SIGKILL))
		<-servers[i].done
	}
	require.NoError(t, os.Remove(filler))
	runServer(3, "s3-restarted")
	servers[3].waitFor(20*time.Second, 1, "replayed the write-ahead log", "server started")
	ph = run("restarted")
	progress(ph, "server 3 restarted from its WAL, server 0 down", 10)
	end(ph)
}

// mountSmallDisk puts dir's files on a tmpfs of size bytes mounted over it,
// unmounted when the test ends (after the processes that use it: cleanups
// run last in, first out). It skips the test where it cannot mount.
func mountSmallDisk(t *testing.T, dir string, size int) {
	t.Helper()
	mountOver(t, dir, func() {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
			testutil.SkipUnprivileged(t, "cannot mount a tmpfs for a server's directory (%v): this test needs root", err)
		}
	})
}

// mountOver runs mount, which mounts a file system over dir, with dir's
// files (a server's keys and certificates) copied onto it, and unmounts it
// when the test ends (after the processes that use it: cleanups run last
// in, first out).
func mountOver(t *testing.T, dir string, mount func()) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		files[e.Name()] = b
	}
	mount()
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(dir, syscall.MNT_DETACH)) })
	require.NoError(t, os.Chmod(dir, 0o700))
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
}

// fill writes a file in dir until its file system is full, and returns it.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	require.NoError(t, err)
	chunk := make([]byte, 4<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			require.True(t, errors.Is(err, syscall.ENOSPC), "filling the disk: %v", err)
			break
		}
	}
	require.NoError(t, f.Close())
	return path
}
