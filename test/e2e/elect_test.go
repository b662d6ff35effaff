package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fenceScript is the CMD of every candidate: it records its pid, then, every
// 50 ms, writes "VALUE TERM" to a fenced resource — a file each write is
// appended to (one write(2) of a short line with O_APPEND: whole, and in the
// order the writes reach it). The resource takes a write only if the
// writer's term is not below the highest it took, as docs/election.md asks
// of what a leader writes; fence replays the file to say which it took.
// There is no lock around a write, so a writer frozen at any point holds
// nothing up: with a flock around each write (the test's first resource), a
// leader frozen inside it kept its successor from ever writing, though the
// successor led.
const fenceScript = `echo $$ > "$PIDS/$BQ_LEADER_VALUE"
while :; do
  echo "$BQ_LEADER_VALUE $BQ_ELECTION_TERM" >> "$RES/log"
  sleep 0.05
done
`

// fenceWrite is one write to the fenced resource and whether it took it.
type fenceWrite struct {
	value, term string
	taken       bool
}

// fence replays the writes of log, in order: a write is taken if its term
// (N, a decimal number, then T, 16 hex digits) is not below the highest
// taken so far.
func fence(t *testing.T, log []string) []fenceWrite {
	t.Helper()
	parse := func(term string) (n, tie uint64) {
		ns, ts, ok := strings.Cut(term, ".")
		require.True(t, ok, "term %q", term)
		n, err := strconv.ParseUint(ns, 10, 64)
		require.NoError(t, err, "term %q", term)
		require.Len(t, ts, 16, "term %q", term)
		tie, err = strconv.ParseUint(ts, 16, 64)
		require.NoError(t, err, "term %q", term)
		return n, tie
	}
	var out []fenceWrite
	var hiN, hiT uint64
	for _, l := range log {
		f := strings.Fields(l)
		require.Len(t, f, 2, "a write of %q", l)
		n, tie := parse(f[1])
		w := fenceWrite{value: f[0], term: f[1], taken: n > hiN || n == hiN && tie >= hiT}
		if w.taken {
			hiN, hiT = n, tie
		}
		out = append(out, w)
	}
	return out
}

// Failover with real processes (docs/election.md, "What it guarantees"):
// the leader is frozen (SIGSTOP of bqclient and its CMD), the next candidate
// leads within about a TTL, and the thawed leader has its CMD killed and
// exits 4, its writes refused by the fence from its successor's first on;
// then the new leader is killed with kill -9, its CMD dies with it, and a
// third candidate leads. Terms grow at each change.
func TestElectFailoverFreezeAndKill(t *testing.T) {
	const ttl = "1s"
	dir := initCluster(t, 4)
	runServers(t, dir, 4)
	cluster := filepath.Join(dir, "cluster.yaml")
	work := t.TempDir()
	res, pids := filepath.Join(work, "res"), filepath.Join(work, "pids")
	require.NoError(t, os.MkdirAll(res, 0o755))
	require.NoError(t, os.MkdirAll(pids, 0o755))
	script := filepath.Join(work, "fence.sh")
	require.NoError(t, os.WriteFile(script, []byte(fenceScript), 0o755))
	env := []string{"RES=" + res, "PIDS=" + pids}
	candidate := func(value string) *proc {
		return start(t, "candidate "+value, env, bin("bqclient"), "--cluster", cluster, "--identity", filepath.Join(work, value+".key"),
			"elect", "svc", value, "--ttl", ttl, "--", "sh", script)
	}
	writes := func() []fenceWrite {
		b, _ := os.ReadFile(filepath.Join(res, "log"))
		// Whole lines only: a write may be on its way as the file is read.
		var log []string
		if i := strings.LastIndexByte(string(b), '\n'); i >= 0 {
			log = strings.Split(string(b[:i]), "\n")
		}
		return fence(t, log)
	}
	wrote := func(value string) bool {
		for _, w := range writes() {
			if w.value == value && w.taken {
				return true
			}
		}
		return false
	}
	cmdPid := func(value string) int {
		b, err := os.ReadFile(filepath.Join(pids, value))
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		return pid
	}
	alive := func(pid int) bool { return syscall.Kill(pid, 0) == nil }

	a := candidate("a")
	waitUntil(t, 15*time.Second, func() bool { return wrote("a") })
	b := candidate("b")
	// b waits: it writes nothing while a leads.
	b.waitFor(15*time.Second, 1, "created identity")

	// Freeze a: its bqclient and its CMD's process group.
	aCmd := cmdPid("a")
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGSTOP))
	require.NoError(t, syscall.Kill(-aCmd, syscall.SIGSTOP))
	frozen := time.Now()
	waitUntil(t, 15*time.Second, func() bool { return wrote("b") })
	t.Logf("b led %v after a froze (TTL %s)", time.Since(frozen).Round(time.Millisecond), ttl)
	require.NoError(t, syscall.Kill(-aCmd, syscall.SIGCONT))
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
	require.Equal(t, 4, a.waitExit(15*time.Second), "the thawed leader exits 4")
	require.Contains(t, a.output(), "lead of svc lost")
	waitUntil(t, 5*time.Second, func() bool { return !alive(aCmd) })

	// kill -9 of b: its CMD dies with it (Linux), and c leads.
	c := candidate("c")
	c.waitFor(15*time.Second, 1, "created identity")
	bCmd := cmdPid("b")
	killed := time.Now()
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGKILL))
	waitUntil(t, 15*time.Second, func() bool { return wrote("c") })
	t.Logf("c led %v after kill -9 of b (TTL %s)", time.Since(killed).Round(time.Millisecond), ttl)
	waitUntil(t, 5*time.Second, func() bool { return !alive(bCmd) })
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	c.waitExit(15 * time.Second)

	// The fence's log: leaders in the order a, b, c, and once a later one
	// wrote, an earlier one never wrote again (the fence refused it).
	var order []string
	for _, w := range writes() {
		if !w.taken {
			t.Logf("fenced off: %s %s", w.value, w.term)
			continue
		}
		if len(order) == 0 || order[len(order)-1] != w.value {
			order = append(order, w.value)
		}
	}
	require.Equal(t, []string{"a", "b", "c"}, order, "each leader wrote only until its successor began")
}

// elect --leader and --observe, and the exit code without a leader.
func TestElectLeaderAndObserve(t *testing.T) {
	dir := initCluster(t, 4)
	runServers(t, dir, 4)
	cluster := filepath.Join(dir, "cluster.yaml")
	work := t.TempDir()
	cli := func(args ...string) []string {
		return append([]string{bin("bqclient"), "--cluster", cluster, "--identity", filepath.Join(work, "w.key")}, args...)
	}
	none := start(t, "leader (none)", nil, cli("elect", "svc", "--leader")...)
	require.Equal(t, 3, none.waitExit(15*time.Second), none.output())
	require.Contains(t, none.output(), "no leader")

	obs := start(t, "observer", nil, cli("elect", "svc", "--observe", "--json")...)
	lead := start(t, "leader", nil, bin("bqclient"), "--cluster", cluster, "--identity", filepath.Join(work, "l.key"),
		"elect", "svc", "10.0.0.7:8080", "--", "sh", "-c", `echo "term=$BQ_ELECTION_TERM value=$BQ_LEADER_VALUE"; sleep 60`)
	lead.waitFor(15*time.Second, 1, "term=", "value=10.0.0.7:8080")
	obs.waitFor(15*time.Second, 1, `"value":"10.0.0.7:8080"`, `"leader":true`)

	got := start(t, "leader (one)", nil, cli("elect", "svc", "--leader")...)
	require.Equal(t, 0, got.waitExit(15*time.Second), got.output())
	require.Equal(t, "10.0.0.7:8080\n", got.output())
	term := strings.Fields(lead.output()[strings.Index(lead.output(), "term=")+len("term="):])[0]
	obs.waitFor(time.Second, 1, `"term":"`+term+`"`)
	code, _ := obs.stop(syscall.SIGINT, 10*time.Second)
	require.Equal(t, 0, code, obs.output())
	_, _ = lead.stop(syscall.SIGTERM, 10*time.Second)
}
