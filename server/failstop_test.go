package server_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/internal/testcluster"
	"github.com/bq-lock/bq/server"
	"github.com/bq-lock/bq/server/store"
)

// Fail-stop on a disk that rots (docs/protocol.md change 69, rules 5 and
// 6), on real servers over QUIC with real bbolt files.

// holdOnce takes and releases lock name with a fresh client identity, whose
// public key it returns: the servers store it in their values.
func holdOnce(t *testing.T, tc *testcluster.Cluster, name string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := tc.Key()
	c, err := bq.Dial(ctx, bq.Config{Cluster: tc.Cluster, Identity: key})
	require.NoError(t, err)
	defer c.Close()
	h, err := c.Mutex(name).Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))
	return key.Public.Wire.Key
}

// rot flips one bit in every copy of needle in the file at path, as a disk
// that rots would in the values that hold it, and reports how many it
// changed.
func rot(t *testing.T, path string, needle []byte) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	n := 0
	for off := 0; ; {
		i := bytes.Index(b[off:], needle)
		if i < 0 {
			break
		}
		at := off + i + len(needle)/2
		_, err := f.WriteAt([]byte{b[at] ^ 0x10}, int64(at))
		require.NoError(t, err)
		n, off = n+1, off+i+len(needle)
	}
	require.NoError(t, f.Sync())
	return n
}

// A value that rots while the server runs is found by the background scrub,
// not by a client: the server stops voting, signing and answering, says
// which bucket and key, writes its CORRUPT mark, and refuses to start again
// while the mark is there; the other three keep serving locks.
func TestScrubFindsRotAndTheServerStops(t *testing.T) {
	tc := testcluster.Start(t, 4, false)
	pub := holdOnce(t, tc, "rot/before")
	set, err := server.ParseSettings("test", []byte("scrub_interval: 20ms\n"))
	require.NoError(t, err)
	tc.Settings = set
	tc.Stop(3)
	tc.StartServer(3)
	s := tc.Server(3)
	st := server.StoreOf(s)
	// A read applies every record of the WAL to bbolt: what the client
	// left is in the file, where the disk can change it.
	_, err = st.Get("meta", []byte("incarnation"))
	require.NoError(t, err)
	require.Positive(t, rot(t, st.Path(), pub), "the client's key is not in server 3's bq.db")

	select {
	case <-s.Failed():
	case <-time.After(time.Minute):
		t.Fatal("the scrub did not find the rotten value within a minute (scrub_interval 20ms)")
	}
	// It answers nobody: its UDP port is free.
	pc, err := net.ListenPacket("udp", s.Addr())
	require.NoError(t, err, "server 3 still holds its port after it stopped itself")
	require.NoError(t, pc.Close())
	failure := s.Failure()
	var ie *store.IntegrityError
	require.ErrorAs(t, failure, &ie, "%v", failure)
	require.NotEmpty(t, ie.Bucket, "the failure names no bucket: %v", failure)
	require.ErrorIs(t, failure, store.ErrFailed)
	mark, err := os.ReadFile(filepath.Join(certs.ServerDir(tc.Dir, 3), server.CorruptFileName))
	require.NoError(t, err, "no CORRUPT mark after the scrub found damage")
	require.Contains(t, string(mark), ie.Bucket)
	require.Contains(t, string(mark), "server replace")
	tc.Stop(3) // Close does not repeat the store's failure

	_, err = server.Start(server.Config{Dir: tc.Dir, ID: 3})
	var marked *server.MarkedCorruptError
	require.ErrorAs(t, err, &marked, "%v", err)
	require.ErrorIs(t, err, store.ErrFailed)

	holdOnce(t, tc, "rot/after") // one stopped member is within f
}

// A value that rotted while the server was stopped is found when it starts:
// Start fails with store.ErrCorrupt and marks the directory, and the next
// start refuses on the mark alone, before it opens the store.
func TestStartFindsRotAndMarksTheServer(t *testing.T) {
	tc := testcluster.Start(t, 4, false)
	pub := holdOnce(t, tc, "rot/before")
	tc.Stop(2)
	db := filepath.Join(certs.ServerDir(tc.Dir, 2), "bq.db")
	require.Positive(t, rot(t, db, pub), "the client's key is not in server 2's bq.db")

	_, err := server.Start(server.Config{Dir: tc.Dir, ID: 2})
	require.ErrorIs(t, err, store.ErrCorrupt, "%v", err)
	require.ErrorIs(t, err, store.ErrFailed)
	var marked *server.MarkedCorruptError
	require.False(t, errors.As(err, &marked), "the first start found the damage itself")
	why, ok := server.CorruptMark(certs.ServerDir(tc.Dir, 2))
	require.True(t, ok, "no CORRUPT mark after Start found damage")
	require.Contains(t, why, "corrupt")

	_, err = server.Start(server.Config{Dir: tc.Dir, ID: 2})
	require.ErrorAs(t, err, &marked, "%v", err)
	require.ErrorIs(t, err, store.ErrFailed)
}
