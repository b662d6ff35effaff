package bq

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
)

// waitLeader reads the election's leader until it is want's client with
// value (each read is a round trip to every server: no guessing at timing).
func waitLeader(t *testing.T, e *Election, client wire.ClientID, value string) *Leader {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		l, err := e.Leader(ctxFor(t, waitTimeout))
		if err == nil && l.Client == client && l.Value == value {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader never became %s with %q; last: %+v, %v", client, value, l, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestElectionCampaignProclaimResign(t *testing.T) {
	tc := newCluster(t, 4)
	a, b, watcher := tc.dial(Config{}), tc.dial(Config{}), tc.dial(Config{})
	ctx := ctxFor(t, waitTimeout)

	_, err := watcher.Election("svc").Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)
	require.Contains(t, err.Error(), "nobody holds")

	la, err := a.Election("svc").Campaign(ctx, "a:8080")
	require.NoError(t, err)
	require.Equal(t, a.ID(), la.Term().Client)
	require.Equal(t, "a:8080", la.Value())
	l := waitLeader(t, watcher.Election("svc"), a.ID(), "a:8080")
	require.Equal(t, la.Term(), l.Term)
	require.Equal(t, uint64(1), l.Rev)

	require.NoError(t, la.Proclaim(ctx, "a:9090"))
	l = waitLeader(t, watcher.Election("svc"), a.ID(), "a:9090")
	require.Equal(t, la.Term(), l.Term, "Proclaim keeps the term")
	require.Equal(t, uint64(2), l.Rev)

	// b waits behind a, and leads with a higher term once a resigns.
	bDone := make(chan *Leadership, 1)
	go func() {
		lb, err := b.Election("svc").Campaign(ctx, "b:8080")
		if err != nil {
			t.Errorf("b's Campaign: %v", err)
		}
		bDone <- lb
	}()
	ls := waitStatus(t, watcher, "svc", "b waiting", func(ls *LockStatus) bool { return queuedWithTicket(ls, b.ID()) })
	require.True(t, holderIs(ls, a.ID()))
	l, err = watcher.Election("svc").Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, a.ID(), l.Client, "a waiting candidate is not the leader")

	require.NoError(t, la.Resign(ctx))
	require.ErrorIs(t, la.Proclaim(ctx, "late"), ErrNotHeld)
	lb := <-bDone
	require.NotNil(t, lb)
	require.True(t, la.Term().Less(lb.Term()), "terms grow: %s then %s", la.Term(), lb.Term())
	waitLeader(t, watcher.Election("svc"), b.ID(), "b:8080")
	require.NoError(t, lb.Resign(ctx))

	_, err = a.Election("svc").Campaign(ctx, strings.Repeat("v", wire.MaxProclaimedValue+1))
	require.ErrorContains(t, err, "limit")
	_, err = watcher.Election("a\nb").Leader(ctx)
	require.Error(t, err)
}

// A plain lock's holder never proclaims: it is not a leader.
func TestElectionLockHolderIsNoLeader(t *testing.T) {
	tc := newCluster(t, 4)
	a, watcher := tc.dial(Config{}), tc.dial(Config{})
	ctx := ctxFor(t, waitTimeout)
	h, err := a.Mutex("plain").Lock(ctx)
	require.NoError(t, err)
	waitStatus(t, watcher, "plain", "a holding", func(ls *LockStatus) bool { return holderIs(ls, a.ID()) && ls.Holder.ReportedBy >= 2 })
	_, err = watcher.Election("plain").Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)
	require.Contains(t, err.Error(), "has not proclaimed")
	require.NoError(t, h.Unlock(ctx))
}

// Observe sends each leader and value in term order, and Run cancels its
// function's context when the lead is lost.
func TestElectionObserveAndRun(t *testing.T) {
	tc := newCluster(t, 4)
	a, b, watcher := tc.dial(Config{}), tc.dial(Config{}), tc.dial(Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	obs := watcher.Election("job").Observe(ctx)

	ran := make(chan struct{})
	release := make(chan struct{})
	runErr := make(chan error, 1)
	go func() {
		runErr <- a.Election("job").Run(ctx, "first", func(ctx context.Context, l *Leadership) error {
			close(ran)
			if err := l.Proclaim(ctx, "second"); err != nil {
				return err
			}
			<-release
			return nil
		})
	}()
	<-ran
	var seen []Leader
	for len(seen) == 0 || seen[len(seen)-1].Value != "second" {
		seen = append(seen, <-obs)
	}
	close(release)
	require.NoError(t, <-runErr)

	lb, err := b.Election("job").Campaign(ctx, "third")
	require.NoError(t, err)
	for seen[len(seen)-1].Value != "third" {
		seen = append(seen, <-obs)
	}
	for i := 1; i < len(seen); i++ {
		require.True(t, newer(&seen[i], &seen[i-1]), "Observe went back: %+v after %+v", seen[i], seen[i-1])
	}
	require.Equal(t, lb.Term(), seen[len(seen)-1].Term)
	require.NoError(t, lb.Resign(ctx))
	cancel()
	for range obs { // closed once ctx ends
	}
}

// Run cancels its function's context when the lead is lost (two of four
// servers stop: the lease guarantee fails) and returns an ErrLockLost.
func TestElectionRunCancelledWhenLeadLost(t *testing.T) {
	tc := newCluster(t, 4)
	a := tc.dial(Config{TTL: 500 * time.Millisecond})
	ctx := ctxFor(t, 2*waitTimeout)
	leading := make(chan struct{})
	cause := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- a.Election("lease").Run(ctx, "v", func(ctx context.Context, l *Leadership) error {
			close(leading)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil
		})
	}()
	<-leading
	tc.stop(2)
	tc.stop(3)
	require.ErrorIs(t, <-cause, ErrLockLost, "the function's context says why it ended")
	require.ErrorIs(t, <-done, ErrLockLost)
}

// Servers keep proclamations in memory only; the leader's client sends its
// latest again on every new connection, so a restarted server, and a whole
// restarted cluster, show the leader's value again (docs/protocol.md §11).
func TestElectionValueSurvivesRestarts(t *testing.T) {
	tc := newCluster(t, 4)
	a, watcher := tc.dial(Config{}), tc.dial(Config{})
	ctx := ctxFor(t, 2*waitTimeout)
	la, err := a.Election("svc").Campaign(ctx, "v1")
	require.NoError(t, err)
	require.NoError(t, la.Proclaim(ctx, "v2"))

	// keptAt waits until server s shows a's value v.
	keptAt := func(s wire.ServerID, v string) {
		t.Helper()
		deadline := time.Now().Add(waitTimeout)
		for {
			rs, _, err := watcher.statusReplies(ctx, "svc", -1)
			require.NoError(t, err)
			if r := rs[s]; r != nil && len(r.Proclamations) == 1 {
				b, err := r.Proclamations[0].Verify(tc.cluster.ID())
				require.NoError(t, err)
				if string(b.Value) == v {
					return
				}
			}
			require.True(t, time.Now().Before(deadline), "server %s never showed %q again", s, v)
			time.Sleep(10 * time.Millisecond)
		}
	}
	keptAt(0, "v2")
	tc.stop(0)
	tc.start(0)
	keptAt(0, "v2")

	for i := range 4 {
		tc.stop(i)
	}
	for i := range 4 {
		tc.start(i)
	}
	waitLeader(t, watcher.Election("svc"), a.ID(), "v2")
	require.NoError(t, la.Err(), "a quick restart of the cluster keeps the lead")
	require.NoError(t, la.Resign(ctx))
}

// dropProclaims is a transport that never sends a Proclaim: servers that
// ignore them (older than protocol 1.2) look like this to a candidate.
type dropProclaims struct{ transport.Transport }

func (d dropProclaims) Send(to transport.Peer, m *wire.Message) error {
	if m.Proclaim != nil {
		return nil
	}
	return d.Transport.Send(to, m)
}

// A Campaign whose value no server keeps gives the lead up after a bounded
// wait, instead of holding the lock for ever as a leader nobody can see.
func TestCampaignGivesUpWhenNoServerKeepsTheValue(t *testing.T) {
	tc := newCluster(t, 4)
	key, err := crypto.GenerateKey(tc.cluster.Scheme, rand.Reader)
	require.NoError(t, err)
	old := tc.dial(Config{TTL: time.Second, Identity: key, newTransport: func(key *crypto.PrivateKey, c *certs.Cluster) (transport.Transport, error) {
		tr, err := transport.DialClient(transport.ClientConfig{Key: key, Cluster: c.ID(), Servers: c.Addresses(), CAPool: c.CAPool(), IdentifyServer: c.ServerByCert})
		return dropProclaims{tr}, err
	}})
	other := tc.dial(Config{})
	ctx := ctxFor(t, 2*waitTimeout)
	began := time.Now()
	_, err = old.Election("svc").Campaign(ctx, "v")
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorContains(t, err, "protocol 1.2")
	// Given up after its own bounded wait, not at the end of ctx: a
	// Campaign that held on would return only when ctx ends (an event, not
	// a time bound).
	require.NoError(t, ctx.Err(), "Campaign must give up before the caller's context ends; it returned after %v", time.Since(began))
	lb, err := other.Election("svc").Campaign(ctx, "w")
	require.NoError(t, err, "the lock was given up")
	require.NoError(t, lb.Resign(ctx))
}
