//go:build linux

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

	"github.com/bq-lock/bq/internal/testutil"
)

// TestADiskThatFailsStopsTheServer gives one of four real servers a disk
// that fails under it (issue 57, docs/protocol.md change 69 rule 5): server
// 3's directory is an ext4 file system on a loop device whose backing file
// is sparse on a small tmpfs. Once the tmpfs is full, every block the file
// system has not written before fails at the device: its journal aborts, a
// write fails and an fdatasync returns an error, as a dying disk's do. The
// server must stop at once — exit 9, counted as crashed, no CORRUPT mark
// (nothing was found damaged: a restart on a sound disk is a crash
// recovery) — and never retry, while the lock loops go on with the other
// three, no two holders overlapping and tokens growing. It needs root, a
// loop device, losetup and mkfs.ext4.
func TestADiskThatFailsStopsTheServer(t *testing.T) {
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipUnprivileged(t, "%s is not installed: this test makes a failing disk with it", tool)
		}
	}
	dir := initCluster(t, 4)
	mountFailingDisk(t, filepath.Join(dir, "server-3"))

	var servers []*proc
	for i := range 4 {
		servers = append(servers, start(t, fmt.Sprintf("s%d", i), nil, bin("bqserver"), "run", "--dir", dir, "--id", fmt.Sprint(i)))
	}
	for _, p := range servers {
		p.waitFor(20*time.Second, 3, "accepted server connection")
	}
	stop := filepath.Join(t.TempDir(), "stop")
	loops := startLockLoops(t, dir, "failing", 2, fmt.Sprintf("while [ ! -e '%s' ]", stop), "--timeout", "60s", "--ttl", "2s")
	waitHoldings(t, loops, 5)

	fill(t, failingDiskBacking(dir))
	code := servers[3].waitExit(2 * time.Minute)
	out := servers[3].output()
	require.Equal(t, 9, code, "server 3 did not stop with exit 9 when its disk failed:\n%s", out)
	require.Contains(t, out, "this server's store failed")
	require.NotContains(t, out, "cannot persist; holding every reply", "a failed disk is never retried")
	_, err := os.Stat(filepath.Join(dir, "server-3", "CORRUPT"))
	require.ErrorIs(t, err, os.ErrNotExist, "a failed write or sync is no damage found: no CORRUPT mark")
	t.Logf("server 3 stopped: %s", lastLine(out))

	waitHoldings(t, loops, loops.holdings()+10)
	require.NoError(t, os.WriteFile(stop, nil, 0o600))
	loops.wait(90 * time.Second)
	tokens := loops.checkTokens()
	t.Logf("%d holdings, fencing tokens %s..%s", len(tokens), tokens[0], tokens[len(tokens)-1])
}

// mountFailingDisk puts dir's files on an ext4 file system of 128 MiB on a
// loop device over a sparse file on a 24 MiB tmpfs (failingDiskBacking),
// all undone when the test ends. It skips the test where it cannot.
func mountFailingDisk(t *testing.T, dir string) {
	t.Helper()
	back := dir + ".backing"
	require.NoError(t, os.Mkdir(back, 0o700))
	if err := syscall.Mount("tmpfs", back, "tmpfs", 0, "size=24m,mode=0700"); err != nil {
		testutil.SkipUnprivileged(t, "cannot mount a tmpfs (%v): this test needs root", err)
	}
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(back, syscall.MNT_DETACH)) })
	img := filepath.Join(back, "disk.img")
	require.NoError(t, os.WriteFile(img, nil, 0o600))
	require.NoError(t, os.Truncate(img, 128<<20))
	dev, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		testutil.SkipUnprivileged(t, "cannot attach a loop device (%v): this test needs root and /dev/loop*", err)
	}
	loop := strings.TrimSpace(string(dev))
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", loop).Run() })
	mkfs := exec.Command("mkfs.ext4", "-q", "-E", "lazy_itable_init=1,lazy_journal_init=1", loop)
	b, err := mkfs.CombinedOutput()
	require.NoError(t, err, "mkfs.ext4: %s", b)

	mountOver(t, dir, func() { require.NoError(t, syscall.Mount(loop, dir, "ext4", 0, ""), "mounting %s", loop) })
}

// failingDiskBacking is the tmpfs under server 3's failing disk: once it is
// full, the disk's unwritten blocks fail.
func failingDiskBacking(dir string) string {
	return filepath.Join(dir, "server-3.backing")
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
