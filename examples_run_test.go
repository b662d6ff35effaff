package bq_test

import (
	"bytes"
	"context"
	"io"
	"log"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/bq-lock/bq"
	"github.com/stretchr/testify/require"
)

// TestExamples runs every example of example_test.go, in order, in the
// directory of a local four-server cluster (so their "cluster.yaml" and
// "me.key" are that cluster's and an identity made there), and checks what
// each prints: the same lines every run but for client ids, tickets and
// tokens. Where an example shows what others do (a holder and a queue, a
// detached holding, a leader), the test sets that up first. An example
// that fails calls log.Fatal, which ends the test binary with its message;
// one that logs anything else fails the test.
func TestExamples(t *testing.T) {
	dir := bq.StartLocalCluster(t, 4)
	t.Chdir(dir)
	// A new cluster's tokens start over: so do the resources the examples
	// write to (they keep the highest token seen, across -count runs too).
	store, schedule, config = fencedStore{}, fencedStore{}, rwStore{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial := func(identity string) *bq.Client {
		c, err := bq.Dial(ctx, bq.Config{ClusterFile: "cluster.yaml", IdentityFile: identity, CreateIdentity: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	require.NoError(t, dial("me.key").Close(), "me.key exists before the examples that do not create it")

	const id = `c[0-9a-f]{8}`
	const token = `\d+\.[0-9a-f]{16}`
	run := func(name string, example func(), want string) []string {
		t.Helper()
		re := regexp.MustCompile(`^` + want + `$`)
		var got string
		if !t.Run(name, func(t *testing.T) {
			got = captureExample(t, example)
			require.Regexp(t, re, got, "what %s printed", name)
		}) {
			t.FailNow() // the next examples build on this one's state
		}
		return re.FindStringSubmatch(got)
	}

	run("ExampleDial", ExampleDial, `connected as `+id+`\n`)
	run("ExampleMutex_Lock", ExampleMutex_Lock, ``)
	run("ExampleMutex_TryLock", ExampleMutex_TryLock, `running the report with token `+token+`\n`)

	// A holder of orders and a client waiting behind it.
	holder, waiter := dial("holder.key"), dial("waiter.key")
	h, err := holder.Mutex("orders").Lock(ctx)
	require.NoError(t, err)
	waiting := make(chan error, 1)
	go func() {
		w, err := waiter.Mutex("orders").Lock(ctx)
		if err == nil {
			err = w.Unlock(ctx)
		}
		waiting <- err
	}()
	require.Eventually(t, func() bool {
		st, err := holder.Status(ctx, "orders")
		return err == nil && len(st.Lock.Queue) == 1 && st.Lock.Queue[0].Client == waiter.ID() && st.Lock.Queue[0].Ticket > 0
	}, 15*time.Second, 20*time.Millisecond, "the waiter queued with a ticket")
	m := run("ExampleClient_Status", ExampleClient_Status, `4 of 4 servers answered; 1 more may fail\nheld by ([0-9a-f]{16}), exclusive, token \d+\.[0-9a-f]{16}\n1\. ([0-9a-f]{16}) exclusive, waiting\n`)
	require.Equal(t, []string{holder.ID().Hex()[:16], waiter.ID().Hex()[:16]}, m[1:], "the holder, then the waiter")
	require.NoError(t, h.Unlock(ctx))
	require.NoError(t, <-waiting)

	// A holding of me.key's, left behind by a process that detached.
	detached := dial("me.key")
	_, err = detached.Mutex("orders").Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, detached.Detach())
	run("ExampleClient_Release", ExampleClient_Release, `released: true\n`)

	run("ExampleElection_Run", ExampleElection_Run, `led for three rounds, then resigned\n`)

	// A leader for the observer to see.
	leader := dial("leader.key")
	l, err := leader.Election("scheduler").Campaign(ctx, "10.0.0.8:8080")
	require.NoError(t, err)
	m = run("ExampleElection_Observe", ExampleElection_Observe, `leader (`+id+`) at 10\.0\.0\.8:8080 \(term (`+token+`)\)\nterm (`+token+`): 10\.0\.0\.8:8080\n`)
	require.Equal(t, []string{leader.ID().String(), l.Term().String(), l.Term().String()}, m[1:], "the leader, and its term twice")
	require.NoError(t, l.Resign(ctx))

	run("ExampleElection_Campaign", ExampleElection_Campaign, `leading in term `+token+`\nresigned\n`)
	run("ExampleRWMutex", ExampleRWMutex, ``)
	run("ExampleSemaphore", ExampleSemaphore, `training with one of 4 permits: 4 permits\n`)
	run("ExampleClient_LockAll", ExampleClient_LockAll, `holding accounts/alice token `+token+`\nholding accounts/bob token `+token+`\n`)
}

// captureExample runs example and returns what it printed on standard
// output; anything it logs fails t.
func captureExample(t *testing.T, example func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stdout := os.Stdout
	var logged bytes.Buffer
	log.SetOutput(&logged)
	os.Stdout = w
	out := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	defer func() {
		os.Stdout = stdout
		log.SetOutput(os.Stderr)
	}()
	example()
	os.Stdout = stdout
	require.NoError(t, w.Close())
	got := <-out
	require.Empty(t, logged.String(), "the example logged")
	return got
}
