package bq

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
)

// Observers (docs/protocol.md change 32).

// enroll makes a key enrolled in tc's closed cluster as name.
func (tc *testCluster) enroll(name string) (*crypto.PrivateKey, *crypto.Signed) {
	tc.t.Helper()
	ca, err := certs.LoadClientCA(tc.dir)
	require.NoError(tc.t, err)
	key, err := crypto.GenerateKey(tc.cluster.Scheme, rand.Reader)
	require.NoError(tc.t, err)
	adm, _, err := ca.Enroll(certs.EnrollOptions{Name: name, Key: key.Public, Record: true}, time.Now(), rand.Reader)
	require.NoError(tc.t, err)
	return key, &adm
}

// On a closed cluster an observer of an enrolled identity reads the lock
// its own identity holds in another client — the holder named by its
// certificate — without disturbing that holding; an observer only reads;
// and an unenrolled key is refused as before.
func TestObserverBesideTheHolderOnAClosedCluster(t *testing.T) {
	tc := newClosedCluster(t, 4)
	key, adm := tc.enroll("nightly")
	holder := tc.dial(Config{Identity: key, Admission: adm, TTL: time.Second})
	ctx := ctxFor(t, waitTimeout)
	h, err := holder.Mutex("deploy").Lock(ctx)
	require.NoError(t, err)

	obs := tc.dial(Config{Identity: key, Admission: adm, Observe: true})
	ls := waitStatus(t, obs, "deploy", "the holder named", func(ls *LockStatus) bool {
		return ls.Holder != nil && ls.Holder.Name == "nightly"
	})
	require.Equal(t, holder.ID(), ls.Holder.Client)
	require.Equal(t, h.Token(), ls.Holder.Token())

	_, err = obs.Mutex("deploy").TryLock(ctx)
	require.ErrorIs(t, err, ErrRefused)
	_, err = obs.Release(ctx, "deploy")
	require.ErrorIs(t, err, ErrRefused)

	// Three TTLs of observing: the holding stays, as its lease would not
	// if the observer had displaced the holder's connection.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		_, err := obs.Status(ctx, "deploy")
		require.NoError(t, err)
		select {
		case <-h.Lost():
			t.Fatalf("the holding was lost while an observer of its identity read: %v", h.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	require.NoError(t, obs.Close())
	require.NoError(t, h.Unlock(ctx))

	stranger, err := crypto.GenerateKey(tc.cluster.Scheme, rand.Reader)
	require.NoError(t, err)
	_, err = Dial(ctx, Config{Cluster: tc.cluster, Identity: stranger, Observe: true})
	require.ErrorIs(t, err, ErrNotPermitted)
}

// An observer on an open cluster needs no identity at all.
func TestObserverWithoutIdentityOnAnOpenCluster(t *testing.T) {
	tc := newCluster(t, 4)
	ctx := ctxFor(t, waitTimeout)
	obs, err := Dial(ctx, Config{Cluster: tc.cluster, Observe: true})
	require.NoError(t, err)
	defer obs.Close()
	st, err := obs.Status(ctx, "")
	require.NoError(t, err)
	require.Equal(t, 4, st.Reachable)
}

// Observe is pushed: with the fallback read switched off, an observer still
// hears a new leader and each new value it proclaims.
func TestObserveIsPushed(t *testing.T) {
	defer func(d time.Duration) { observeEvery = d }(observeEvery)
	observeEvery = time.Hour
	tc := newCluster(t, 4)
	obs := tc.dial(Config{Observe: true})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	seen := obs.Election("primary").Observe(ctx)

	cand := tc.dial(Config{})
	l, err := cand.Election("primary").Campaign(ctx, "10.0.0.1")
	require.NoError(t, err)
	next := func(want string) {
		t.Helper()
		for {
			select {
			case got, ok := <-seen:
				require.True(t, ok, "Observe ended before it saw %q", want)
				if got.Value == want {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no push brought %q", want)
			}
		}
	}
	next("10.0.0.1")
	require.NoError(t, l.Proclaim(ctx, "10.0.0.2"))
	next("10.0.0.2")
}

// A member's name is shown only when f+1 replies give the same one, and
// never when it is not a valid client name (change 32).
func TestStatusNamesNeedFPlusOne(t *testing.T) {
	x, y := wire.ClientID{1}, wire.ClientID{2}
	reply := func(names ...wire.ClientName) *wire.StatusReply { return &wire.StatusReply{Names: names} }
	replies := map[wire.ServerID]*wire.StatusReply{
		0: reply(wire.ClientName{Client: x, Name: "ci"}, wire.ClientName{Client: y, Name: "liar"}),
		1: reply(wire.ClientName{Client: x, Name: "ci"}, wire.ClientName{Client: y, Name: "nightly"}),
		2: reply(wire.ClientName{Client: x, Name: "ci"}, wire.ClientName{Client: x, Name: "ci"}, wire.ClientName{Client: y, Name: "bad\x1b[2J"}),
		3: reply(wire.ClientName{Client: y, Name: "bad\x1b[2J"}),
	}
	got := agreedNames(1, []int{0, 1, 2, 3}, replies)
	require.Equal(t, map[wire.ClientID]string{x: "ci"}, got, "f=1: a name needs 2 servers; one server repeating itself counts once; a bad name never")
	got = agreedNames(1, []int{0, 1}, map[wire.ServerID]*wire.StatusReply{0: replies[0], 1: replies[1]})
	require.Equal(t, map[wire.ClientID]string{x: "ci"}, got)
	delete(replies, 0)
	got = agreedNames(2, []int{1, 2, 3}, replies)
	require.Empty(t, got, "f=2: two reports are not enough")
}

// A certificate no client CA of the client's epochs signed may be of a CA
// listed since (issue 44): the client lets the servers decide, and their
// refusal says the files may be out of date. A certificate of another
// cluster is still refused at once, by the client.
func TestAnUnknownClientCAIsTheServersToJudge(t *testing.T) {
	tc := newClosedCluster(t, 4)
	ctx := ctxFor(t, waitTimeout)
	key, err := crypto.GenerateKey(tc.cluster.Scheme, rand.Reader)
	require.NoError(t, err)
	rogue, err := crypto.GenerateKey(tc.cluster.Scheme, rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	body := func() *wire.AdmissionBody {
		return &wire.AdmissionBody{Client: wire.ClientID(key.Public.ID), Name: "x", NotBefore: now.Add(-time.Minute).UnixMilli(), NotAfter: now.Add(time.Hour).UnixMilli()}
	}
	adm, err := wire.SignAdmission(rogue, tc.cluster.ID(), body())
	require.NoError(t, err)
	_, err = Dial(ctx, Config{ClusterFile: tc.clusterFile(), Identity: key, Admission: &adm, TTL: time.Second})
	require.ErrorIs(t, err, ErrNotPermitted, "the servers refuse it")
	require.ErrorContains(t, err, "refused", "the servers' word")
	require.ErrorContains(t, err, "is signed by a client CA that "+tc.clusterFile()+" and the epochs beside it (epoch 0) do not list")

	other, err := wire.SignAdmission(rogue, wire.ClusterID{1}, body())
	require.NoError(t, err)
	// Refused by the client before any connection: no transport is made
	// (an event, not a time bound).
	_, err = Dial(ctx, Config{Cluster: tc.cluster, Identity: key, Admission: &other, TTL: time.Second,
		newTransport: func(*crypto.PrivateKey, *certs.Cluster) (transport.Transport, error) {
			t.Error("the client connected before refusing a certificate of another cluster")
			return nil, errors.New("no transport in this test")
		}})
	require.ErrorIs(t, err, ErrNotPermitted)
	require.ErrorContains(t, err, "is not valid for cluster")
}
