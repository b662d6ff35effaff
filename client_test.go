package bq

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// Dial's configuration errors come at once, one clear error each, and an
// identity file is made only when asked to.
func TestDialConfig(t *testing.T) {
	tc := newCluster(t, 4)
	ctx := ctxFor(t, waitTimeout)
	key, err := crypto.GenerateKey(tc.cluster.Scheme, rand.Reader)
	require.NoError(t, err)

	_, err = Dial(ctx, Config{Identity: key})
	require.ErrorContains(t, err, "no cluster")
	_, err = Dial(ctx, Config{Cluster: tc.cluster})
	require.ErrorContains(t, err, "no identity")
	_, err = Dial(ctx, Config{Cluster: tc.cluster, Identity: key, TTL: 50 * time.Millisecond})
	require.ErrorContains(t, err, "below the minimum")
	_, err = Dial(ctx, Config{ClusterFile: filepath.Join(t.TempDir(), "missing.yaml"), Identity: key})
	require.Error(t, err)

	idFile := filepath.Join(t.TempDir(), "me.key")
	_, err = Dial(ctx, Config{ClusterFile: tc.clusterFile(), IdentityFile: idFile})
	require.ErrorIs(t, err, certs.ErrNoIdentity, "no CreateIdentity: a missing file is an error")
	_, statErr := os.Stat(idFile)
	require.ErrorIs(t, statErr, os.ErrNotExist)

	c, err := Dial(ctx, Config{ClusterFile: tc.clusterFile(), IdentityFile: idFile, CreateIdentity: true})
	require.NoError(t, err)
	id := c.ID()
	require.Equal(t, tc.cluster.N, c.Cluster().N)
	require.NoError(t, c.Close())
	c, err = Dial(ctx, Config{ClusterFile: tc.clusterFile(), IdentityFile: idFile, CreateIdentity: true})
	require.NoError(t, err)
	require.Equal(t, id, c.ID(), "the identity file made by the first Dial is used again")
	require.NoError(t, c.Close())
}

// Dial with too few servers up fails with ErrUnavailable when its context
// ends, not later, and says how many servers answered.
func TestDialUnavailable(t *testing.T) {
	for _, up := range []int{0, 2} {
		t.Run(fmt.Sprintf("%d-up", up), func(t *testing.T) {
			tc := newCluster(t, 4)
			for i := up; i < 4; i++ {
				tc.stop(i)
			}
			key, err := crypto.GenerateKey(tc.cluster.Scheme, rand.Reader)
			require.NoError(t, err)
			const wait = 1500 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			start := time.Now()
			c, err := Dial(ctx, Config{Cluster: tc.cluster, Identity: key})
			took := time.Since(start)
			require.Nil(t, c)
			require.ErrorIs(t, err, ErrUnavailable)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.ErrorContains(t, err, fmt.Sprintf("%d of 4 servers answered, need 3", up))
			// Not later: a Dial that waited on past its context would wait
			// for servers that never come up, or at least for QUIC's
			// handshake timeout (10 s). raceLate: -race on 2 cores.
			require.Less(t, took, wait+raceLate, "Dial must return at its deadline")
			t.Logf("Dial returned after %v: %v", took, err)
		})
	}
}

// docs/protocol.md §5: a holder whose lease guarantee fails (here: two of four
// servers stop, so no quorum acknowledges its heartbeats) sees Lost closed
// promptly, and Unlock says ErrLockLost. Once the servers are back, the
// client locks again in a new session, and its new holding has a higher
// token; the next client is not held up by the lost one.
func TestLostWhenLeaseFails(t *testing.T) {
	const ttl = 500 * time.Millisecond
	tc := newCluster(t, 4)
	c := tc.dial(Config{TTL: ttl})
	other := tc.dial(Config{})
	ctx := ctxFor(t, 2*waitTimeout)

	h, err := c.Mutex("lease").Lock(ctx)
	require.NoError(t, err)
	c.mu.Lock()
	session := c.bk.Session()
	c.mu.Unlock()

	start := time.Now()
	tc.stop(2)
	tc.stop(3)
	select {
	case <-h.Lost():
	case <-time.After(waitTimeout):
		t.Fatal("Lost was not closed after the lease guarantee failed")
	}
	took := time.Since(start)
	t.Logf("Lost closed %v after two servers stopped (TTL %v)", took, ttl)
	// The guarantee lapses about one TTL after the last quorum's ack; with
	// two servers down nothing renews it, and no reset can come (it needs
	// q votes), so a client that did not watch its own lease would never
	// close Lost (the select above). raceLate: the loss timer may fire late
	// under -race on 2 cores.
	require.Less(t, took, ttl+raceLate, "Lost must close within about one TTL")
	require.ErrorIs(t, h.Unlock(ctx), ErrLockLost)
	require.ErrorIs(t, h.Unlock(ctx), ErrLockLost, "still lost")

	tc.start(2)
	tc.start(3)
	h2, err := c.Mutex("lease").Lock(ctx)
	require.NoError(t, err, "after the servers are back, a new Lock works")
	c.mu.Lock()
	require.Greater(t, c.bk.Session(), session, "in a new session")
	c.mu.Unlock()
	require.True(t, h.Token().Less(h2.Token()), "token %s after the lost %s", h2.Token(), h.Token())
	select {
	case <-h2.Lost():
		t.Fatal("the new holding is lost")
	default:
	}
	r := lockAsync(ctx, other, "lease")
	require.NoError(t, h2.Unlock(ctx))
	got := await(t, r)
	require.NoError(t, got.err, "the next client is not held up by the lost holding")
	require.True(t, h2.Token().Less(got.h.Token()))
	require.NoError(t, got.h.Unlock(ctx))
}

// Release ends a holding this identity left behind in another process (here
// a client that took the lock and Detached): the next client gets the lock
// without waiting for the detached session's lease to run out.
func TestReleaseDetachedHolding(t *testing.T) {
	tc := newCluster(t, 4)
	idFile := filepath.Join(t.TempDir(), "shared.key")
	ctx := ctxFor(t, waitTimeout)
	cfg := Config{ClusterFile: tc.clusterFile(), IdentityFile: idFile, CreateIdentity: true, TTL: time.Minute}

	a, err := Dial(ctx, cfg)
	require.NoError(t, err)
	h, err := a.Mutex("detached").Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Detach())
	require.NoError(t, a.Close(), "Close after Detach does nothing")

	third := tc.dial(Config{})
	ls := lockStatus(t, third, "detached")
	require.True(t, holderIs(ls, a.ID()), "the detached holding stays: %s", describe(ls))
	waiting := lockAsync(ctx, third, "detached")

	b := tc.dial(cfg) // the same identity, in another "process"
	require.Equal(t, a.ID(), b.ID())
	released, err := b.Release(ctx, "detached")
	require.NoError(t, err)
	require.True(t, released, "Release found the detached holding")
	start := time.Now()
	got := await(t, waiting)
	require.NoError(t, got.err)
	// Generous (-race on 2 cores): without Release the waiter would wait
	// for the detached lease, a minute and more.
	require.Less(t, time.Since(start), 10*time.Second, "the waiter got the lock long before the detached lease (1 min) ran out")
	require.True(t, h.Token().Less(got.h.Token()))

	released, err = b.Release(ctx, "detached")
	require.NoError(t, err)
	require.False(t, released, "nothing of this identity is left")
	released, err = b.Release(ctx, "never-used")
	require.NoError(t, err)
	require.False(t, released, "nothing held")
	require.NoError(t, got.h.Unlock(ctx))
}

// Status: the cluster's shape and how many more faults it tolerates, with
// every server up, with one down, and with too few to serve locks.
func TestStatusServers(t *testing.T) {
	tc := newCluster(t, 4)
	c := tc.dial(Config{})
	ctx := ctxFor(t, waitTimeout)

	st, err := c.Status(ctx, "")
	require.NoError(t, err)
	require.Equal(t, 4, st.N)
	require.Equal(t, 1, st.F)
	require.Equal(t, 3, st.Quorum)
	require.Equal(t, 4, st.Reachable)
	require.Equal(t, 1, st.FaultsTolerated)
	require.Len(t, st.Servers, 4)
	for i, s := range st.Servers {
		require.True(t, s.Reachable, "server %d", i)
		require.Equal(t, tc.cluster.Servers[i].Address, s.Address)
		require.Equal(t, tc.cluster.Servers[i].ID, s.ID)
	}
	require.Nil(t, st.Lock)

	for _, tt := range []struct{ down, tolerated int }{{1, 0}, {2, -1}} {
		down, tolerated := tt.down, tt.tolerated
		tc.stop(4 - down)
		sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // the stopped servers never answer
		st, err = c.Status(sctx, "")
		cancel()
		require.NoError(t, err)
		require.Equal(t, 4-down, st.Reachable, "%d down", down)
		require.Equal(t, tolerated, st.FaultsTolerated, "%d down", down)
		for i, s := range st.Servers {
			require.Equal(t, i < 4-down, s.Reachable, "server %d with %d down", i, down)
		}
	}
}

// Status of one lock: the holder, then the queue in ticket order (the
// order they will enter in), every entry signed by its client; and the
// cluster-wide summary counts the lock's members.
func TestStatusHolderAndQueue(t *testing.T) {
	tc := newCluster(t, 4)
	holder := tc.dial(Config{})
	waiters := []*Client{tc.dial(Config{}), tc.dial(Config{}), tc.dial(Config{})}
	ctx := ctxFor(t, 2*waitTimeout)

	h, err := holder.Mutex("queue").Lock(ctx)
	require.NoError(t, err)
	results := make([]<-chan lockResult, len(waiters))
	for i, w := range waiters {
		results[i] = lockAsync(ctx, w, "queue")
		waitStatus(t, holder, "queue", fmt.Sprintf("waiter %d's ticket", i), func(ls *LockStatus) bool { return queuedWithTicket(ls, w.ID()) })
	}
	ls := lockStatus(t, holder, "queue")
	require.Equal(t, "queue", ls.Name)
	require.NotNil(t, ls.Holder, describe(ls))
	require.Equal(t, holder.ID(), ls.Holder.Client)
	require.Equal(t, h.Token().N, ls.Holder.Ticket)
	require.Positive(t, ls.Holder.ReportedBy)
	require.Len(t, ls.Queue, len(waiters), describe(ls))
	prev := Token{N: ls.Holder.Ticket, Client: ls.Holder.Client}
	for i, p := range ls.Queue {
		require.Equal(t, waiters[i].ID(), p.Client, "queue position %d: %s", i, describe(ls))
		tok := Token{N: p.Ticket, Client: p.Client}
		require.True(t, prev.Less(tok), "queue position %d", i)
		require.Positive(t, p.ReportedBy)
		prev = tok
	}
	require.Empty(t, ls.Suspected)
	require.Empty(t, ls.Banned)

	st, err := holder.Status(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []LockSummary{{Name: "queue", Members: 1 + len(waiters)}}, st.Locks)

	// They enter in queue order.
	require.NoError(t, h.Unlock(ctx))
	for i := range waiters {
		got := await(t, results[i])
		require.NoError(t, got.err)
		require.Equal(t, waiters[i].ID(), got.h.Token().Client, "entry %d", i)
		for j := i + 1; j < len(waiters); j++ {
			pending(t, results[j], fmt.Sprintf("waiter %d while %d holds", j, i))
		}
		require.NoError(t, got.h.Unlock(ctx))
	}
}

// A Lock that is waiting (holding nothing) when its session's lease guarantee
// fails starts over in a new session and still gets the lock: it returns
// only when held or when its context ends.
func TestWaitingLockSurvivesSessionLoss(t *testing.T) {
	tc := newCluster(t, 4)
	holder := tc.dial(Config{})
	waiter := tc.dial(Config{TTL: 500 * time.Millisecond})
	ctx := ctxFor(t, 2*waitTimeout)

	h, err := holder.Mutex("retry").Lock(ctx)
	require.NoError(t, err)
	waiter.mu.Lock()
	first := waiter.bk.Session()
	waiter.mu.Unlock()
	r := lockAsync(ctx, waiter, "retry")
	waitStatus(t, holder, "retry", "the waiter queued", func(ls *LockStatus) bool { return len(ls.Queue) == 1 })

	tc.stop(2)
	tc.stop(3)
	deadline := time.Now().Add(waitTimeout)
	for {
		waiter.mu.Lock()
		lost := waiter.bk.Session() > first || waiter.bk.Attempt("retry") == 0
		waiter.mu.Unlock()
		if lost {
			break
		}
		require.True(t, time.Now().Before(deadline), "the waiter's session never failed")
		time.Sleep(10 * time.Millisecond)
	}
	tc.start(2)
	tc.start(3)
	select {
	case got := <-r:
		t.Fatalf("the waiting Lock returned while the lock was held: %+v", got)
	default:
	}
	require.NoError(t, h.Unlock(ctx))
	got := await(t, r)
	require.NoError(t, got.err, "the waiter gets the lock in its new session")
	waiter.mu.Lock()
	require.Greater(t, waiter.bk.Session(), first)
	waiter.mu.Unlock()
	require.True(t, h.Token().Less(got.h.Token()))
	require.NoError(t, got.h.Unlock(ctx))
}

// A TTL the servers refuse is reported as such, at once, with their reason:
// not as an outage after the whole context (docs/protocol.md §6).
func TestDialRefusedTTL(t *testing.T) {
	tc := newCluster(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	start := time.Now()
	_, err = Dial(ctx, Config{Cluster: tc.cluster, Identity: key, TTL: time.Hour})
	require.ErrorIs(t, err, ErrRefused)
	require.NotErrorIs(t, err, ErrUnavailable)
	require.ErrorContains(t, err, "limit max_ttl (5m0s) reached: a lease TTL of 1h0m0s is above it")
	require.NotContains(t, err.Error(), "\n")
	require.NoError(t, ctx.Err(), "refused at once, not after the context (took %v)", time.Since(start))
}

// A holder that keeps heartbeating may stay in the critical section as long
// as it likes (no deadline without --max-hold, §5): it is never reset, it only
// delays the others, and status shows it as the holder with the queue behind.
func TestLongHolderOnlyDelaysOthers(t *testing.T) {
	const ttl = 300 * time.Millisecond
	tc := newCluster(t, 4)
	holder := tc.dial(Config{TTL: ttl})
	waiter := tc.dial(Config{TTL: ttl})
	ctx := ctxFor(t, 2*waitTimeout)
	h, err := holder.Mutex("long").Lock(ctx)
	require.NoError(t, err)
	r := lockAsync(ctx, waiter, "long")
	st := waitStatus(t, waiter, "long", "the waiter queued behind the holder", func(ls *LockStatus) bool {
		return ls.Holder != nil && len(ls.Queue) == 1
	})
	require.Equal(t, holder.ID(), st.Holder.Client)
	require.Equal(t, waiter.ID(), st.Queue[0].Client)
	// Hold for ten TTLs.
	select {
	case <-h.Lost():
		t.Fatal("a heartbeating holder lost its lock")
	case got := <-r:
		t.Fatalf("the waiter got in while the holder held: %+v", got)
	case <-time.After(10 * ttl):
	}
	require.NoError(t, h.Unlock(ctx))
	got := await(t, r)
	require.NoError(t, got.err)
	require.NoError(t, got.h.Unlock(ctx))
}

// docs/protocol.md §2: a client's sessions come from a counter next to its
// identity (IDENTITY.session), never from the clock, so each Dial of one
// identity opens a higher session than the last; and while one Client has
// the identity open, a second one is refused with ErrIdentityInUse instead
// of silently sharing it, saying that it is this process's own.
func TestDialSessionsFromTheIdentityCounter(t *testing.T) {
	tc := newCluster(t, 4)
	ctx := ctxFor(t, waitTimeout)
	idFile := filepath.Join(t.TempDir(), "me.key")
	cfg := Config{ClusterFile: tc.clusterFile(), IdentityFile: idFile, CreateIdentity: true}

	var last uint64
	for range 3 {
		c, err := Dial(ctx, cfg)
		require.NoError(t, err)
		c.mu.Lock()
		sess := c.bk.Session()
		c.mu.Unlock()
		require.Greater(t, sess, last)
		last = sess

		_, err = Dial(ctx, cfg)
		require.ErrorIs(t, err, ErrIdentityInUse)
		// Another Client of this very process, not another process (issue 55).
		require.EqualError(t, err, "bq: identity "+idFile+" is in use in this process: another Client of this process has it open (a Client is safe for concurrent use: share that one, or give each its own identity)")
		require.NoError(t, c.Close())
	}
	_, err := os.Stat(certs.SessionFileOf(idFile))
	require.NoError(t, err, "the counter is next to the identity")
}

// A detached holding outlives other work of the same identity: another
// "process" with the identity takes and releases another lock and closes
// (its session ends at once), and the detached holding is still there, to
// run out with its own lease (docs/protocol.md change 18). Checked when
// written: without change 18 the holding is gone as soon as b closes.
func TestDetachedHoldingSurvivesOtherLocks(t *testing.T) {
	tc := newCluster(t, 4)
	idFile := filepath.Join(t.TempDir(), "shared.key")
	ctx := ctxFor(t, waitTimeout)
	const ttl = 3 * time.Second
	cfg := Config{ClusterFile: tc.clusterFile(), IdentityFile: idFile, CreateIdentity: true, TTL: ttl}

	a, err := Dial(ctx, cfg)
	require.NoError(t, err)
	h, err := a.Mutex("detached").Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Detach())
	detachedAt := time.Now()

	b, err := Dial(ctx, Config{ClusterFile: tc.clusterFile(), IdentityFile: idFile, TTL: time.Second})
	require.NoError(t, err)
	hb, err := b.Mutex("other").Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, hb.Unlock(ctx))
	require.NoError(t, b.Close())

	third := tc.dial(Config{})
	ls := lockStatus(t, third, "detached")
	// No time bound is needed: b closed before this status was asked, and
	// without change 18 its close ends the detached holding at once; with
	// it, the holding stays until its lease runs out and a reset follows,
	// so seeing it here, however late (-race on 2 cores), shows it
	// survived b.
	require.True(t, holderIs(ls, a.ID()), "the detached holding survived: %s", describe(ls))

	got, err := third.Mutex("detached").Lock(ctx)
	require.NoError(t, err, "the detached holding ends with its lease")
	require.Greater(t, time.Since(detachedAt), ttl*9/10)
	require.True(t, h.Token().Less(got.Token()))
	require.NoError(t, got.Unlock(ctx))
}

// A client of another protocol major version (docs/protocol.md §1,
// "Versions") is refused by every server in the TLS handshake: Dial fails at
// once with ErrRefused that says so, not as an outage after its context.
func TestDialAnotherProtocolVersion(t *testing.T) {
	tc := newCluster(t, 4)
	key, err := crypto.GenerateKey(tc.cluster.Scheme, rand.Reader)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = Dial(ctx, Config{Cluster: tc.cluster, Identity: key, newTransport: func(key *crypto.PrivateKey, c *certs.Cluster) (transport.Transport, error) {
		return transport.DialClient(transport.ClientConfig{
			Key: key, Cluster: c.ID(), Servers: c.Addresses(), CAPool: c.CAPool(), IdentifyServer: c.ServerByCert,
			Version: wire.Version{Major: wire.ProtocolMajor + 1},
		})
	}})
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "speaks no protocol version this client does (bq/2)")
	require.NoError(t, ctx.Err(), "refused at once")
}
