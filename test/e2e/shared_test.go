package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// docs/protocol.md change 60, real processes: three `bqclient lock cfg
// --shared` readers are in together (each leaves a marker and waits for a
// go file); a writer that came after them waits; once they leave, the
// writer runs alone (no reader's marker while it runs), and its token
// exceeds theirs.
func TestReadersTogetherThenTheWriterAlone(t *testing.T) {
	dir := initCluster(t, 4)
	runServers(t, dir, 4)
	work := t.TempDir()
	cluster := filepath.Join(dir, "cluster.yaml")
	goFile := filepath.Join(work, "go")
	var readers []*proc
	for i := range 3 {
		cs := fmt.Sprintf(`echo "$BQ_LOCK_TOKEN $BQ_LOCK_MODE" > '%[1]s/r%[2]d'; while [ ! -e '%[3]s' ]; do sleep 0.02; done; rm '%[1]s/r%[2]d'`, work, i, goFile)
		readers = append(readers, start(t, fmt.Sprintf("reader %d", i), []string{"BQ_IDENTITY=" + filepath.Join(work, fmt.Sprintf("r%d.key", i))},
			bin("bqclient"), "--cluster", cluster, "lock", "cfg", "--shared", "--timeout", "60s", "--", "sh", "-c", cs))
	}
	markers := func() []string {
		m, err := filepath.Glob(filepath.Join(work, "r[0-9]"))
		require.NoError(t, err)
		return m
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(markers()) < 3 {
		require.True(t, time.Now().Before(deadline), "three readers were not in together within 60 s: %v", markers())
		time.Sleep(20 * time.Millisecond)
	}
	var readerTokens []string
	for _, m := range markers() {
		b, err := os.ReadFile(m)
		require.NoError(t, err)
		token, mode, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		require.Equal(t, "shared", mode)
		readerTokens = append(readerTokens, token)
	}

	cs := fmt.Sprintf(`ls '%[1]s'/r[0-9] 2>/dev/null && exit 99; echo "$BQ_LOCK_TOKEN $BQ_LOCK_MODE" > '%[1]s/w'`, work)
	writer := start(t, "writer", []string{"BQ_IDENTITY=" + filepath.Join(work, "w.key")},
		bin("bqclient"), "--cluster", cluster, "lock", "cfg", "--timeout", "60s", "--", "sh", "-c", cs)
	// The writer is queued behind the readers while they hold: ask status
	// until it shows the writer waiting with its ticket (or the writer
	// ends, which it must not).
	var status string
	for {
		out, err := exec.Command(bin("bqclient"), "--cluster", cluster, "--identity", filepath.Join(work, "look.key"), "status", "cfg").CombinedOutput()
		status = string(out)
		if err == nil && strings.Contains(status, "exclusive, waiting, ticket") {
			break
		}
		select {
		case <-writer.done:
			t.Fatalf("the writer ended (%v) while three readers held the lock:\n%s", writer.err, writer.output())
		default:
		}
		require.True(t, time.Now().Before(deadline), "the writer never showed queued: %s", status)
		time.Sleep(50 * time.Millisecond)
	}
	// One model in text and JSON (issue 55): the three readers under
	// "holders", each shared with its token; the writer alone under
	// "queue", exclusive and waiting.
	require.Regexp(t, `(?m)^  holders: 3\n( +[0-9a-f]{16} shared, token=\S+ \(reported by \d\)\n){3}  queue: 1, in the order they will enter\n +1\. [0-9a-f]{16} exclusive, waiting, ticket \d+ \(reported by \d\)$`, status)
	out, err := exec.Command(bin("bqclient"), "--cluster", cluster, "--identity", filepath.Join(work, "look.key"), "status", "cfg", "--json").Output()
	require.NoError(t, err)
	type participant struct{ Client, State, Phase, Mode, Token string }
	var st struct {
		Lock struct {
			Holder  participant
			Holders []participant
			Queue   []participant
		}
	}
	require.NoError(t, json.Unmarshal(out, &st), "%s", out)
	require.Len(t, st.Lock.Holders, 3, "%s", out)
	for _, h := range st.Lock.Holders {
		require.Equal(t, participant{Client: h.Client, State: "holding", Phase: "Held", Mode: "shared", Token: h.Token}, h)
		require.Contains(t, readerTokens, h.Token)
	}
	require.Equal(t, st.Lock.Holders[0], st.Lock.Holder, "holder is the first of holders")
	require.Len(t, st.Lock.Queue, 1, "the queue holds no holder: %s", out)
	require.Equal(t, "waiting", st.Lock.Queue[0].State)
	require.Equal(t, "exclusive", st.Lock.Queue[0].Mode)
	_, err = os.Stat(filepath.Join(work, "w"))
	require.True(t, os.IsNotExist(err), "the writer ran while three readers held the lock")

	require.NoError(t, os.WriteFile(goFile, nil, 0o644))
	for _, r := range readers {
		require.Zero(t, r.waitExit(30*time.Second), r.output())
	}
	require.Zero(t, writer.waitExit(60*time.Second), "exit 99: a reader's marker was there while the writer ran\n%s", writer.output())
	b, err := os.ReadFile(filepath.Join(work, "w"))
	require.NoError(t, err)
	wtoken, mode, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	require.Equal(t, "exclusive", mode)
	for _, rt := range readerTokens {
		require.True(t, tokenLess(t, rt, wtoken), "the writer's token %s does not exceed a reader's %s", wtoken, rt)
	}
}

// Change 60, real processes: five shell loops take one of 2 permits of
// "pool" 10 times each. Inside, each takes one of two slot directories
// (mkdir is atomic): a third holder would find both taken and exit 99. The
// loops must also have been two inside at once, at least once.
func TestASemaphoreOfTwoNeverHasThreeInside(t *testing.T) {
	loops, rounds := 5, 10
	if testing.Short() {
		rounds = 4
	}
	dir := initCluster(t, 4)
	runServers(t, dir, 4)
	work := t.TempDir()
	cluster := filepath.Join(dir, "cluster.yaml")
	cs := filepath.Join(work, "cs.sh")
	together := filepath.Join(work, "together")
	require.NoError(t, os.WriteFile(cs, []byte(fmt.Sprintf(`if mkdir '%[1]s/s1' 2>/dev/null; then mine=s1
elif mkdir '%[1]s/s2' 2>/dev/null; then mine=s2; echo x >> '%[2]s'
else exit 99; fi
sleep 0.05
rmdir "%[1]s/$mine"
`, work, together)), 0o755))
	var ps []*proc
	for i := range loops {
		script := fmt.Sprintf(`for i in $(seq %d); do '%s' --cluster '%s' lock pool --permits 2 --timeout 60s -- sh '%s' || exit $?; done`,
			rounds, bin("bqclient"), cluster, cs)
		ps = append(ps, start(t, fmt.Sprintf("loop %d", i), []string{"BQ_IDENTITY=" + filepath.Join(work, fmt.Sprintf("l%d.key", i))}, "sh", "-c", script))
	}
	for i, p := range ps {
		require.Zero(t, p.waitExit(4*time.Minute), "loop %d (exit 99: three inside)", i)
	}
	require.Positive(t, countLines(together), "two holders were never inside together")
	t.Logf("%d of %d holdings began with another holder inside", countLines(together), loops*rounds)
}

// Issue 55, item 3, real processes: `--permits 3` against holders of
// `--permits 2` says that the counts differ, not only "busy": --try in its
// one line (exit 3), and a waiting lock once on stderr while it waits,
// which then enters when the holder leaves.
func TestAnotherPermitsCountSaysSo(t *testing.T) {
	dir := initCluster(t, 4)
	runServers(t, dir, 4)
	c := bqc{t: t, cluster: filepath.Join(dir, "cluster.yaml"), work: t.TempDir()}
	holder := start(t, "holder", []string{"BQ_CLUSTER=" + c.cluster, "BQ_IDENTITY=" + filepath.Join(c.work, "h.key")},
		bin("bqclient"), "lock", "pool", "--permits", "2", "--", "sh", "-c", `echo "in $BQ_LOCK_TOKEN"; exec sleep 60`)
	holder.waitFor(20*time.Second, 1, "in ")
	token := strings.Fields(holder.output()[strings.Index(holder.output(), "in ")+3:])[0]
	hint := `held as 2 permits by [0-9a-f]{16} \(token ` + regexp.QuoteMeta(token) + `\); you asked for 3 permits: a semaphore's holders must all give the same count`

	r := c.run("w.key", "lock", "pool", "--permits", "3", "--try", "--", "true")
	require.Equal(t, 3, r.code, r.err)
	require.Regexp(t, `^bqclient lock: lock "pool" is busy: `+hint+`\n$`, strings.Join(stderrLines(r.err), "\n")+"\n")

	waiter := start(t, "waiter", []string{"BQ_CLUSTER=" + c.cluster, "BQ_IDENTITY=" + filepath.Join(c.work, "w.key")},
		bin("bqclient"), "lock", "pool", "--permits", "3", "--timeout", "60s", "--", "echo", "waiter-in")
	waiter.waitFor(20*time.Second, 1, `bqclient: waiting for "pool": held as 2 permits by `)
	require.Regexp(t, `bqclient: waiting for "pool": `+hint+`\n`, waiter.output())
	code, _ := holder.stop(syscall.SIGTERM, 10*time.Second)
	require.NotZero(t, code, "the holder's command was ended")
	require.Zero(t, waiter.waitExit(30*time.Second), waiter.output())
	require.Contains(t, waiter.output(), "waiter-in")
	require.Equal(t, 1, strings.Count(waiter.output(), "bqclient: waiting for"), "said once: %s", waiter.output())
}
