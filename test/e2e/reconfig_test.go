package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/stretchr/testify/require"
)

// Reconfiguration between real processes (docs/protocol.md change 43, issue
// 28): a member is replaced while three shell loops take a fenced lock; the
// cluster CA is rotated and another member replaced under the new CA; the
// first removed one, killed with -9 and restarted with its old material,
// serves nothing; a client started afterwards with the old cluster file
// alone still locks.
func TestReplaceUnderLockLoops(t *testing.T) {
	dir := initCluster(t, 4)
	servers := runServers(t, dir, 4)
	stop := filepath.Join(t.TempDir(), "stop")
	loops := startLockLoops(t, dir, "demo", 3, fmt.Sprintf("while [ ! -e '%s' ]", stop), "--timeout", "60s")
	waitHoldings(t, loops, 10)

	out, code := runCLI(t, "bqserver", "server", "replace", "2", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "epoch 1 endorsed by servers ")
	require.Contains(t, out, "server 4 is new")
	require.Contains(t, out, "bqserver run --dir "+dir+" --id 4")
	for _, i := range []int{0, 1, 3} {
		servers[i].waitFor(20*time.Second, 1, `msg="serving the cluster's epoch"`)
	}
	s4 := start(t, "s4", nil, bin("bqserver"), "run", "--dir", dir, "--id", "4")
	s4.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
	waitHoldings(t, loops, loops.holdings()+10)

	// A CA rotation, then a member replaced under the new CA: every server
	// and client trusts the new member's certificate of the new CA.
	out, code = runCLI(t, "bqserver", "ca", "rotate", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "the cluster CA is now")
	out, code = runCLI(t, "bqserver", "server", "replace", "0", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "server 5 is new")
	s5 := start(t, "s5", nil, bin("bqserver"), "run", "--dir", dir, "--id", "5")
	s5.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
	waitHoldings(t, loops, loops.holdings()+10)
	out, code = runCLI(t, "bqserver", "server", "list", "--dir", dir, "--timeout", "5s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "epoch 3; n=4 f=1 q=3; 4 of 4 servers reachable")
	// The dashboard (issue 44): every member serves epoch 3; the three the
	// first CA issued are marked for a replace, the one the new CA issued
	// is not; server 0, left out by epoch 3, has sealed and may stop.
	require.Equal(t, 4, strings.Count(out, "serving 3"), out)
	require.Equal(t, 3, strings.Count(out, "(retired: replace it)"), out)
	require.Regexp(t, `(?m)^0 +leaves +\S+ +reachable +sealed 2: may be stopped now`, out)
	require.Contains(t, out, "available: every member serves epoch 3 (q=3): 1 may fail")
	st := bqc{t: t, cluster: filepath.Join(dir, "cluster.yaml"), work: t.TempDir()}.run("look.key", "status")
	require.Equal(t, 0, st.code, st.out+st.err)
	require.Contains(t, st.out, "epoch 3; servers: 4 of 4 reachable (quorum 3)")
	require.NotContains(t, st.out, "s2 ", "the removed member is no server of the cluster's status")

	// The removed member, killed and restarted with its old material, is
	// sealed: it serves nothing, and the loops never notice.
	require.NoError(t, servers[2].cmd.Process.Signal(syscall.SIGKILL))
	<-servers[2].done
	old := start(t, "s2-again", nil, bin("bqserver"), "run", "--dir", dir, "--id", "2")
	old.waitFor(20*time.Second, 1, "server started")
	require.NotContains(t, old.output(), `msg="serving the cluster's epoch"`)
	waitHoldings(t, loops, loops.holdings()+10)

	// A client that has only the cluster file of epoch 0 learns epoch 1
	// from the cluster before anything it does counts, and locks.
	stale := filepath.Join(t.TempDir(), "old")
	require.NoError(t, os.MkdirAll(stale, 0o755))
	b, err := os.ReadFile(filepath.Join(dir, "cluster.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(stale, "cluster.yaml"), b, 0o644))
	res := bqc{t: t, cluster: filepath.Join(stale, "cluster.yaml"), work: stale}.run("id.key", "lock", "demo", "--timeout", "30s", "--", "sh", "-c", "echo token=$BQ_LOCK_TOKEN")
	require.Equal(t, 0, res.code, res.out+res.err)
	require.Contains(t, res.out, "token=")

	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	loops.wait(2 * time.Minute)
	tokens := loops.checkTokens()
	t.Logf("%d holdings across the replace, fencing tokens %s..%s", len(tokens), tokens[0], tokens[len(tokens)-1])
	require.False(t, strings.Contains(old.output(), "panic"))
}

// waitHoldings waits until the loops recorded at least n holdings.
func waitHoldings(t *testing.T, l *lockLoops, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for l.holdings() < n {
		select {
		case <-l.ended:
			t.Fatalf("the loops ended after %d holdings, before %d", l.holdings(), n)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d holdings within 90s, want %d (liveness across the change)", l.holdings(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Grow from f=1 to f=2 while the loops run: three server add, each new
// server started; then two servers are killed with -9 and the loops go on
// (seven members tolerate two faults).
func TestGrowFourToSevenThenKillTwo(t *testing.T) {
	dir := initCluster(t, 4)
	servers := runServers(t, dir, 4)
	stop := filepath.Join(t.TempDir(), "stop")
	loops := startLockLoops(t, dir, "demo", 3, fmt.Sprintf("while [ ! -e '%s' ]", stop), "--timeout", "60s")
	waitHoldings(t, loops, 5)
	base := freePortBase(t, 3)
	for i := range 3 {
		id := 4 + i
		out, code := runCLI(t, "bqserver", "server", "add", "--dir", dir, "--port", fmt.Sprint(base+i), "--timeout", "2s")
		require.Contains(t, out, fmt.Sprintf("server %d is new", id))
		// The members kept are a quorum of the new epoch (at n=7 f=2, q=5
		// of the six kept): it is served before the new server starts.
		require.Equal(t, 0, code, out)
		if i == 2 {
			require.Contains(t, out, "(n=7 f=2 q=5; epoch 2 had n=6 f=1)")
		}
		s := start(t, fmt.Sprintf("s%d", id), nil, bin("bqserver"), "run", "--dir", dir, "--id", fmt.Sprint(id))
		s.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
		servers = append(servers, s)
		waitHoldings(t, loops, loops.holdings()+5)
	}
	out, code := runCLI(t, "bqserver", "server", "list", "--dir", dir, "--timeout", "5s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "epoch 3; n=7 f=2 q=5; 7 of 7 servers reachable")

	for _, i := range []int{0, 5} {
		require.NoError(t, servers[i].cmd.Process.Signal(syscall.SIGKILL))
	}
	waitHoldings(t, loops, loops.holdings()+10)
	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	loops.wait(2 * time.Minute)
	loops.checkTokens()
}

// The client CA rotates on a running closed cluster: certificates of the
// old and the new admit until the old is retired; the retirement refuses
// while a client is not renewed, and once forced, that client is refused
// and the renewed ones lock.
func TestRotateTheClientCAOnARunningCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	out, err := exec.Command(bin("bqserver"), "init", "--dir", dir, "--servers", "4",
		"--port-base", fmt.Sprint(freePortBase(t, 4))).CombinedOutput()
	require.NoError(t, err, "%s", out)
	runServers(t, dir, 4)
	work := t.TempDir()
	id := func(name string) string { return filepath.Join(work, name+".identity") }
	lock := func(name string) (string, int) {
		return runCLI(t, "bqclient", "--cluster", filepath.Join(dir, "cluster.yaml"), "--identity", id(name), "lock", "ci/x", "--", "true")
	}
	for _, name := range []string{"x", "z"} {
		o, code := runCLI(t, "bqserver", "client", "add", name, "--dir", dir, "--out", id(name))
		require.Equal(t, 0, code, o)
	}
	o, code := runCLI(t, "bqserver", "ca", "rotate-clients", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, o)
	require.Contains(t, o, "a new client CA is in force")
	o, code = runCLI(t, "bqserver", "client", "add", "y", "--dir", dir, "--out", id("y"))
	require.Equal(t, 0, code, o)
	for _, name := range []string{"x", "y", "z"} {
		o, code := lock(name)
		require.Equal(t, 0, code, "%s: %s", name, o)
	}

	o, code = runCLI(t, "bqserver", "client", "renew", "x", "--dir", dir, "--identity", id("x"))
	require.Equal(t, 0, code, o)
	o, code = runCLI(t, "bqserver", "ca", "retire-clients", "--dir", dir)
	require.Equal(t, 1, code, o)
	require.Contains(t, o, "1 enrolled clients still have a certificate of an older client CA: z")
	o, code = runCLI(t, "bqserver", "ca", "retire-clients", "--dir", dir, "--force", "--timeout", "20s")
	require.Equal(t, 0, code, o)
	require.Contains(t, o, "the older client CAs are retired")
	o, code = lock("z")
	require.Equal(t, 7, code, o)
	for _, name := range []string{"x", "y"} {
		o, code := lock(name)
		require.Equal(t, 0, code, "%s: %s", name, o)
	}
}

// A member change on a closed cluster (the default): a member is replaced
// and another added while enrolled clients lock; the new members admit the
// clients enrolled before (their door checks the client CA the chain names),
// a client enrolled after the change locks, status works for an enrolled
// identity, a client revoked after the change is refused by old and new
// members alike, and an unenrolled key is refused by all.
func TestChangesOnAClosedCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	out, err := exec.Command(bin("bqserver"), "init", "--dir", dir, "--servers", "4",
		"--port-base", fmt.Sprint(freePortBase(t, 4))).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "The cluster is closed")
	servers := runServers(t, dir, 4)
	cluster := filepath.Join(dir, "cluster.yaml")
	work := t.TempDir()
	id := func(name string) string { return filepath.Join(work, name+".identity") }
	client := func(name string, args ...string) (string, int) {
		return runCLI(t, "bqclient", append([]string{"--cluster", cluster, "--identity", id(name)}, args...)...)
	}
	for _, name := range []string{"x", "y"} {
		o, code := runCLI(t, "bqserver", "client", "add", name, "--dir", dir, "--out", id(name))
		require.Equal(t, 0, code, o)
	}
	o, code := client("x", "lock", "ci/a", "--", "true")
	require.Equal(t, 0, code, o)

	o, code = runCLI(t, "bqserver", "server", "replace", "1", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, o)
	require.Contains(t, o, "server 4 is new")
	s4 := start(t, "s4", nil, bin("bqserver"), "run", "--dir", dir, "--id", "4")
	s4.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
	o, code = runCLI(t, "bqserver", "server", "add", "--dir", dir, "--port", fmt.Sprint(freePortBase(t, 1)), "--timeout", "20s")
	require.Equal(t, 0, code, o)
	require.Contains(t, o, "server 5 is new")
	s5 := start(t, "s5", nil, bin("bqserver"), "run", "--dir", dir, "--id", "5")
	s5.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)

	// The old member 1 is gone for good: every access now needs a new
	// member (n=5 f=1 q=4 of 0, 2, 3, 4, 5; stopping 0 leaves exactly q).
	require.NoError(t, servers[1].cmd.Process.Signal(syscall.SIGKILL))
	<-servers[1].done
	code, _ = servers[0].stop(syscall.SIGTERM, 10*time.Second)
	require.Equal(t, 0, code)

	for _, name := range []string{"x", "y"} {
		o, code := client(name, "lock", "ci/b", "--timeout", "30s", "--", "true")
		require.Equal(t, 0, code, "%s, enrolled before the change: %s", name, o)
	}
	o, code = runCLI(t, "bqserver", "client", "add", "z", "--dir", dir, "--out", id("z"))
	require.Equal(t, 0, code, o)
	o, code = client("z", "lock", "ci/c", "--timeout", "30s", "--", "true")
	require.Equal(t, 0, code, "z, enrolled after the change: %s", o)
	o, code = client("x", "status")
	require.Equal(t, 0, code, o)
	require.Contains(t, o, "epoch 2")

	o, code = client("stranger", "lock", "ci/d", "--", "true")
	require.Equal(t, 7, code, o)
	require.Contains(t, o, "no admission certificate")
	o, code = runCLI(t, "bqserver", "client", "revoke", "y", "--dir", dir)
	require.Equal(t, 0, code, o)
	o, code = client("y", "lock", "ci/e", "--timeout", "30s", "--", "true")
	require.Equal(t, 7, code, o)
	require.Contains(t, o, "revoked")
	o, code = client("x", "lock", "ci/e", "--timeout", "30s", "--", "true")
	require.Equal(t, 0, code, o)
}

// Issue 43's attack, with real processes: a closed cluster of four whose
// server 2 is correct in all but its copy parts (bqserver-byzantine with
// forge-copy: an hw at 2^62−1 of every lock it saw, signed by a key it made
// up, with no J or another lock's J; a session 2^63 with a TTL of 2^32−1 ms
// for every client; every TTL raised; counters at 2^62; forged
// certificates). Three enrolled clients lock three locks; server 3's disk
// dies (it is stopped) and the operator replaces it, so every copy reads
// server 2's parts (q = 3 of the three left). Afterwards every client locks
// every lock, and every token is above the ones before it. Before change 47
// every client failed on every lock for good: the forged session locked
// each identity out, the forged hw took every lock to the ticket cap.
func TestFaultyCopierThroughAReplace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	out, err := exec.Command(bin("bqserver"), "init", "--dir", dir, "--servers", "4",
		"--port-base", fmt.Sprint(freePortBase(t, 4))).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var servers []*proc
	for i := range 4 {
		args := []string{bin("bqserver"), "run", "--dir", dir, "--id", itoa(i)}
		if i == 2 {
			args = []string{bin("bqserver-byzantine"), "--dir", dir, "--id", itoa(i), "--behaviours", "forge-copy"}
		}
		servers = append(servers, start(t, fmt.Sprintf("s%d", i), nil, args...))
	}
	for _, p := range servers {
		p.waitFor(20*time.Second, 1, "server started")
	}
	cluster := filepath.Join(dir, "cluster.yaml")
	work := t.TempDir()
	clients, locks := []string{"a", "b", "c"}, []string{"L0", "L1", "L2"}
	for _, name := range clients {
		o, code := runCLI(t, "bqserver", "client", "add", name, "--dir", dir, "--out", filepath.Join(work, name+".identity"))
		require.Equal(t, 0, code, o)
	}
	last := map[string]string{}
	lockAll := func(when string) {
		t.Helper()
		for _, lock := range locks {
			for _, name := range clients {
				o, code := runCLI(t, "bqclient", "--cluster", cluster, "--identity", filepath.Join(work, name+".identity"),
					"lock", lock, "--timeout", "30s", "--", "sh", "-c", "echo token=$BQ_LOCK_TOKEN")
				require.Equal(t, 0, code, "%s locks %s %s: %s", name, lock, when, o)
				i := strings.Index(o, "token=")
				require.GreaterOrEqual(t, i, 0, o)
				tok := strings.Fields(o[i+len("token="):])[0]
				if prev, ok := last[lock]; ok {
					require.True(t, tokenLess(t, prev, tok), "%s's token %s on %s %s is not above %s", name, tok, lock, when, prev)
				}
				last[lock] = tok
			}
		}
	}
	lockAll("before the change")

	code, _ := servers[3].stop(syscall.SIGKILL, 10*time.Second)
	require.NotEqual(t, 0, code)
	o, code := runCLI(t, "bqserver", "server", "replace", "3", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, o)
	require.Contains(t, o, "server 4 is new")
	s4 := start(t, "s4", nil, bin("bqserver"), "run", "--dir", dir, "--id", "4")
	s4.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
	for _, i := range []int{0, 1} {
		servers[i].waitFor(20*time.Second, 1, `msg="serving the cluster's epoch"`)
	}

	lockAll("after the change")
	for _, lock := range locks {
		n, _, _ := strings.Cut(last[lock], ".")
		require.Less(t, len(n), 6, "%s's token %s: the forged hw (2^62−1) counted", lock, last[lock])
	}
}

// An observer follows changes as a session's client does (change 43): two
// servers are replaced and killed, so that of epoch 0's members only two of
// four still run. One started from the cluster file alone then reads the
// same leader as before; one started before the changes still sees the
// next leader, read from the new members.
func TestObserverFollowsAChange(t *testing.T) {
	dir := initCluster(t, 4)
	servers := runServers(t, dir, 4)
	cluster := filepath.Join(dir, "cluster.yaml")
	work := t.TempDir()
	cli := func(key string, args ...string) []string {
		return append([]string{bin("bqclient"), "--cluster", cluster, "--identity", filepath.Join(work, key)}, args...)
	}
	obs := start(t, "observer", nil, cli("o.key", "elect", "svc", "--observe", "--json")...)
	first := start(t, "leader 1", nil, cli("l1.key", "elect", "svc", "10.0.0.7:8080", "--", "sleep", "600")...)
	obs.waitFor(20*time.Second, 1, `"value":"10.0.0.7:8080"`, `"leader":true`)

	for i, old := range []int{2, 3} {
		out, code := runCLI(t, "bqserver", "server", "replace", fmt.Sprint(old), "--dir", dir, "--timeout", "20s")
		require.Equal(t, 0, code, out)
		id := 4 + i
		s := start(t, fmt.Sprintf("s%d", id), nil, bin("bqserver"), "run", "--dir", dir, "--id", fmt.Sprint(id))
		s.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
		require.NoError(t, servers[old].cmd.Process.Signal(syscall.SIGKILL))
	}

	// An observer started now, from the cluster file alone (epoch 0, two of
	// whose four members still run), follows to epoch 2 and reads the
	// same leader as before the change.
	only := filepath.Join(t.TempDir(), "only")
	require.NoError(t, os.MkdirAll(only, 0o755))
	data, err := os.ReadFile(cluster)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(only, "cluster.yaml"), data, 0o644))
	leader := start(t, "leader (after)", nil, bin("bqclient"), "--cluster", filepath.Join(only, "cluster.yaml"),
		"--identity", filepath.Join(work, "r.key"), "elect", "svc", "--leader")
	require.Equal(t, 0, leader.waitExit(30*time.Second), leader.output())
	require.Contains(t, leader.output(), "10.0.0.7:8080\n")

	_, _ = first.stop(syscall.SIGTERM, 20*time.Second) // it resigns
	second := start(t, "leader 2", nil, cli("l2.key", "elect", "svc", "10.0.0.8:8080", "--", "sleep", "600")...)
	obs.waitFor(60*time.Second, 1, `"value":"10.0.0.8:8080"`)
	code, _ := obs.stop(syscall.SIGINT, 10*time.Second)
	require.Equal(t, 0, code, obs.output())
	_, _ = second.stop(syscall.SIGTERM, 10*time.Second)
}

// docs/protocol.md change 52, issue 43's holder: a client renewed during a
// client-CA rotation keeps its lock through retire-clients. The servers
// close the connections the retired CA admitted; the holder, running all
// along, reconnects showing the renewed certificate its identity file now
// holds, and every server takes it back. A contender waits in vain; the
// holder releases when its command ends, exit 0.
func TestRenewedHolderKeepsItsLockThroughRetireClients(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	out, err := exec.Command(bin("bqserver"), "init", "--dir", dir, "--servers", "4",
		"--port-base", fmt.Sprint(freePortBase(t, 4))).CombinedOutput()
	require.NoError(t, err, "%s", out)
	servers := runServers(t, dir, 4)
	work := t.TempDir()
	id := func(name string) string { return filepath.Join(work, name+".identity") }
	cli := func(name string, args ...string) []string {
		return append([]string{bin("bqclient"), "--cluster", filepath.Join(dir, "cluster.yaml"), "--identity", id(name)}, args...)
	}
	for _, name := range []string{"h", "y"} {
		o, code := runCLI(t, "bqserver", "client", "add", name, "--dir", dir, "--out", id(name))
		require.Equal(t, 0, code, o)
	}
	o, code := runCLI(t, "bqserver", "ca", "rotate-clients", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, o)

	stop := filepath.Join(work, "stop")
	holder := start(t, "holder", nil, cli("h", "lock", "ci/held", "--ttl", "2s", "--",
		"sh", "-c", fmt.Sprintf("echo held; while [ ! -e '%s' ]; do sleep 0.05; done", stop))...)
	holder.waitFor(20*time.Second, 1, "held")
	for _, name := range []string{"h", "y"} {
		o, code := runCLI(t, "bqserver", "client", "renew", name, "--dir", dir, "--identity", id(name))
		require.Equal(t, 0, code, o)
	}
	o, code = runCLI(t, "bqserver", "ca", "retire-clients", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, o)
	for _, s := range servers {
		s.waitFor(20*time.Second, 1, "a connected client's certificate is of a client CA now retired")
		s.waitFor(20*time.Second, 1, "came back with a certificate of a CA in force", `name=h`)
	}

	y := func(args ...string) (string, int) { return runCLI(t, "bqclient", cli("y", args...)[1:]...) }
	o, code = y("lock", "ci/held", "--timeout", "3s", "--", "true")
	require.Equal(t, 3, code, "the holder still holds: %s", o)
	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	require.Equal(t, 0, holder.waitExit(20*time.Second), holder.output())
	o, code = y("lock", "ci/held", "--timeout", "20s", "--", "true")
	require.Equal(t, 0, code, o)
}

// Issue 54, item 1 (docs/protocol.md change 63), with real processes: a
// holder with a 15 s TTL never reaches s2 (its cluster file gives s2 a port
// nothing listens on), so s2 knows its session from forwards only, with the
// servers' default TTL of 2 s. The holder is stopped (SIGSTOP: its
// guarantee, counted by its own acks, lasts at least 0.9·15 − 15/3 = 8.5 s
// from then) and s3 is replaced. s0 is the faulty member, voting at once in
// the new epoch (vote-at-change). Were s2's lease restarted with the default
// TTL at its copy's end, s2's vote and s0's would make the new member's
// copied lease give way, and s0, s2 and s4 would end the holder's session
// about 2 s after the copy: a waiter would enter while the holder still
// held. The waiter must not enter before the holder's guarantee can have
// ended.
func TestKeptMemberWaitsTheHoldersTTLThroughAReplace(t *testing.T) {
	dir := initCluster(t, 4)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "server.yaml"), []byte("default_ttl: 2s\n"), 0o644))
	var servers []*proc
	for i := range 4 {
		args := []string{bin("bqserver"), "run", "--dir", dir, "--id", itoa(i)}
		if i == 0 {
			args = []string{bin("bqserver-byzantine"), "--dir", dir, "--id", "0", "--behaviours", "vote-at-change"}
		}
		servers = append(servers, start(t, fmt.Sprintf("s%d", i), nil, args...))
	}
	for _, p := range servers {
		p.waitFor(20*time.Second, 3, "accepted server connection")
	}
	cluster := filepath.Join(dir, "cluster.yaml")
	work := t.TempDir()

	// The holder's cluster file: s2 at a port nothing listens on.
	b, err := os.ReadFile(cluster)
	require.NoError(t, err)
	c, err := certs.LoadCluster(cluster)
	require.NoError(t, err)
	s2 := c.Servers[2].Address
	host, _, err := net.SplitHostPort(s2)
	require.NoError(t, err)
	cut := strings.Replace(string(b), "address: "+s2, "address: "+net.JoinHostPort(host, itoa(freePortBase(t, 1))), 1)
	require.NotEqual(t, string(b), cut)
	holderCluster := filepath.Join(work, "holder.yaml")
	require.NoError(t, os.WriteFile(holderCluster, []byte(cut), 0o644))
	holder := start(t, "holder", nil, bin("bqclient"), "--cluster", holderCluster, "--identity", filepath.Join(work, "holder.key"),
		"lock", "L", "--ttl", "15s", "--timeout", "30s", "--", "sh", "-c", "echo held; exec sleep 600")
	holder.waitFor(30*time.Second, 1, "held")
	require.NoError(t, holder.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	t.Cleanup(func() { _ = holder.cmd.Process.Signal(syscall.SIGCONT) })

	o, code := runCLI(t, "bqserver", "server", "replace", "3", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, o)
	s4 := start(t, "s4", nil, bin("bqserver"), "run", "--dir", dir, "--id", "4")
	s4.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)

	waiter := start(t, "waiter", nil, bin("bqclient"), "--cluster", cluster, "--identity", filepath.Join(work, "waiter.key"),
		"lock", "L", "--ttl", "15s", "--timeout", "60s", "--", "sh", "-c", "echo entered")
	waiter.waitFor(60*time.Second, 1, "entered")
	entered := time.Since(stopped)
	guarantee := 15*time.Second*9/10 - 15*time.Second/3
	require.GreaterOrEqual(t, entered, guarantee,
		"the waiter entered %v after the holder stopped, while the holder's guarantee may last %v: two holders", entered.Round(time.Millisecond), guarantee)
	t.Logf("the waiter entered %v after the holder stopped (its guarantee ends %v after at the earliest)", entered.Round(time.Millisecond), guarantee)
}

// Issue 54, item 2 (docs/protocol.md change 64), with real processes: after
// three replacements, the retired members' files (signing and endorsement
// keys) and the CA key leak to the one faulty member left from epoch 0,
// which shows every client a fake epoch 1 of servers of its own, signed by
// that CA and endorsed by those keys (bqserver-byzantine --behaviours
// fork-epoch --leaked 1,2,3). A client that starts from the cluster file
// alone refuses it — the retired members destroyed their keys of epoch 1
// when they endorsed it — learns the real epochs from a retired member
// still running, and locks. Were a retired signing key still an
// endorsement key, the fake epoch would count, the real one shown next
// would be a second epoch 1, and the client would lock nothing.
func TestAnOutOfDateClientRefusesAnEpochForgedWithRetiredKeys(t *testing.T) {
	dir := initCluster(t, 4)
	servers := runServers(t, dir, 4)
	for k, old := range []int{1, 2, 3} {
		o, code := runCLI(t, "bqserver", "server", "replace", itoa(old), "--dir", dir, "--timeout", "20s")
		require.Equal(t, 0, code, o)
		id := 4 + k
		require.Contains(t, o, fmt.Sprintf("server %d is new", id))
		s := start(t, fmt.Sprintf("s%d", id), nil, bin("bqserver"), "run", "--dir", dir, "--id", itoa(id))
		s.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
	}
	// Two retired members stop; s3 stays, sealed, as the one member of
	// epoch 0 a client can still learn the chain from.
	for _, i := range []int{1, 2} {
		servers[i].stop(syscall.SIGKILL, 10*time.Second)
	}
	servers[0].stop(syscall.SIGKILL, 10*time.Second)
	faulty := start(t, "s0-faulty", nil, bin("bqserver-byzantine"), "--dir", dir, "--id", "0", "--behaviours", "fork-epoch", "--leaked", "1,2,3")
	faulty.waitFor(20*time.Second, 1, "holding the leaked keys of retired members")

	stale := filepath.Join(t.TempDir(), "old")
	require.NoError(t, os.MkdirAll(stale, 0o755))
	b, err := os.ReadFile(filepath.Join(dir, "cluster.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(stale, "cluster.yaml"), b, 0o644))
	for range 3 {
		res := bqc{t: t, cluster: filepath.Join(stale, "cluster.yaml"), work: stale}.run("late.key", "lock", "demo", "--timeout", "30s", "--", "sh", "-c", "echo token=$BQ_LOCK_TOKEN")
		require.Equal(t, 0, res.code, "the out-of-date client: %s%s", res.out, res.err)
		require.Contains(t, res.out, "token=")
	}
}
