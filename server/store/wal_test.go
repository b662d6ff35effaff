package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// noTimer keeps the checkpointer's timer out of a test.
const noTimer = time.Hour

// crash stops s as kill -9 would, as far as the files are concerned: the
// pending records are left in the WAL only, never checkpointed.
func crash(t testing.TB, s *Store) {
	t.Helper()
	require.NoError(t, s.close(false))
}

// readChain returns the valid records of the WAL of the database at path,
// without the pass's marker.
func readChain(t testing.TB, path string) []scannedRecord {
	t.Helper()
	buf, err := os.ReadFile(path + walSuffix)
	require.NoError(t, err)
	return dataRecords(t, scanWAL(buf))
}

// dataRecords is chain without its marker, which it must begin with.
func dataRecords(t testing.TB, chain []scannedRecord) []scannedRecord {
	t.Helper()
	if len(chain) == 0 {
		return nil
	}
	_, marker := decodeMarker(chain[0].payload)
	require.True(t, marker, "the chain does not begin with a marker")
	return chain[1:]
}

// dbValue reads bucket/key from the open store's bbolt file, without
// checkpointing first, and checks its tag.
func dbValue(t testing.TB, s *Store, bucket, key string) []byte {
	t.Helper()
	var out []byte
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		out = unsealed(t, tx, bucket, key)
		return nil
	}))
	return out
}

// unsealed reads bucket/key in tx and checks its tag.
func unsealed(t testing.TB, tx *bolt.Tx, bucket, key string) []byte {
	t.Helper()
	b := tx.Bucket([]byte(bucket))
	if b == nil {
		return nil
	}
	stored := b.Get([]byte(key))
	if stored == nil {
		return nil
	}
	v, ok := newSealer().open(sealPrefix(bucket), []byte(key), stored)
	require.True(t, ok, "%s/%s does not match its tag", bucket, key)
	return append([]byte{}, v...)
}

// boltValue reads bucket/key straight from the closed bbolt file, WAL
// ignored, and checks its tag.
func boltValue(t testing.TB, path, bucket, key string) []byte {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var out []byte
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		out = unsealed(t, tx, bucket, key)
		return nil
	}))
	return out
}

func TestWALFileAndOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.db")
	s := openAt(t, path, Options{WALSize: 128 << 10})
	fi, err := os.Stat(path + walSuffix)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.EqualValues(t, 128<<10, fi.Size())
	require.NoError(t, s.Commit(context.Background(), put("w", "k", "v")))
	crash(t, s)

	// Another size: the records are replayed, then the WAL is replaced.
	s = openAt(t, path, Options{WALSize: 256 << 10})
	require.EqualValues(t, 1, s.Stats().Recovered)
	fi, err = os.Stat(path + walSuffix)
	require.NoError(t, err)
	require.EqualValues(t, 256<<10, fi.Size())
	requireValue(t, s, "w", "k", "v")
	require.NoError(t, s.Close())

	_, err = Open(filepath.Join(t.TempDir(), "x.db"), Options{WALSize: MinWALSize - 1, CheckpointInterval: -1})
	require.ErrorContains(t, err, "store: Options.WALSize")
	require.ErrorContains(t, err, "store: Options.CheckpointInterval")
	_, err = Open(filepath.Join(t.TempDir(), "x.db"), Options{WALSize: MaxWALSize + 1})
	require.ErrorContains(t, err, "store: Options.WALSize")
}

func TestReservedBucketRejected(t *testing.T) {
	s := openTest(t, Options{})
	err := s.Commit(context.Background(), put(walBucket, "applied", "x"))
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "reserved")
	require.ErrorIs(t, s.Commit(context.Background(), put("ok", "k", "v"), del(walBucket, "applied")), ErrInvalid)
	_, err = s.Get(walBucket, []byte(walAppliedKey))
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, s.ForEach(walBucket, func(k, v []byte) error { return nil }), ErrInvalid)
	requireAbsent(t, s, "ok", "k")
}

// Commits are acknowledged from the WAL, not from bbolt; Get and ForEach
// still see them, by checkpointing first.
func TestReadsSeeUncheckpointedCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	s := openAt(t, path, Options{CheckpointInterval: noTimer})
	ctx := context.Background()
	require.NoError(t, s.Commit(ctx, put("r", "a", "1"), put("r", "b", "2")))
	require.NoError(t, s.Commit(ctx, del("r", "a"), put("r", "c", "3")))
	st := s.Stats()
	require.Zero(t, st.Checkpoints)
	require.EqualValues(t, 2, st.Txns)
	require.Equal(t, 2, len(readChain(t, path)))

	var keys []string
	require.NoError(t, s.ForEach("r", func(k, v []byte) error {
		keys = append(keys, string(k)+"="+string(v))
		return nil
	}))
	require.Equal(t, []string{"b=2", "c=3"}, keys)
	require.EqualValues(t, 1, s.Stats().Checkpoints)

	require.NoError(t, s.Commit(ctx, put("r", "d", "4")))
	requireValue(t, s, "r", "d", "4")
	require.EqualValues(t, 2, s.Stats().Checkpoints)
	requireValue(t, s, "r", "c", "3") // nothing pending: no checkpoint
	require.EqualValues(t, 2, s.Stats().Checkpoints)
}

// A crash before any checkpoint loses nothing acknowledged: Open replays
// the WAL into bbolt.
func TestRecoveryReplaysAcknowledged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.db")
	s := openAt(t, path, Options{CheckpointInterval: noTimer})
	ctx := context.Background()
	const n = 50
	for i := range n {
		ops := []Op{put("rec", fmt.Sprint(i), fmt.Sprint("v", i)), put("last", "k", fmt.Sprint(i))}
		if i > 0 {
			ops = append(ops, del("rec", fmt.Sprint(i-1)))
		}
		require.NoError(t, s.Commit(ctx, ops...))
	}
	require.NoError(t, s.Commit(ctx, put("rec", "empty", "")))
	require.Zero(t, s.Stats().Checkpoints)
	crash(t, s)
	// The acknowledged records are in the WAL only.
	require.Nil(t, boltValue(t, path, "last", "k"))
	require.Equal(t, n+1, len(readChain(t, path)))

	s = openAt(t, path, Options{CheckpointInterval: noTimer})
	require.EqualValues(t, n+1, s.Stats().Recovered)
	require.Equal(t, fmt.Sprint(n-1), string(dbValue(t, s, "last", "k")), "replayed into the bbolt file by Open")
	requireValue(t, s, "last", "k", fmt.Sprint(n-1))
	requireValue(t, s, "rec", fmt.Sprint(n-1), fmt.Sprint("v", n-1))
	requireValue(t, s, "rec", "empty", "")
	for i := range n - 1 {
		requireAbsent(t, s, "rec", fmt.Sprint(i))
	}
	require.NoError(t, s.Check())

	// Replayed once: a second crash and Open replays nothing old.
	require.NoError(t, s.Commit(ctx, put("rec", "after", "1")))
	crash(t, s)
	s = openAt(t, path, Options{})
	require.EqualValues(t, 1, s.Stats().Recovered)
	requireValue(t, s, "rec", "after", "1")
	requireValue(t, s, "last", "k", fmt.Sprint(n-1))
}

// Many records through a small WAL: the writer wraps around many times,
// and a crash at any point keeps every acknowledged Commit. The crash comes
// with one Commit in the WAL only (checkpoints are held for it), so the
// reopening must replay.
func TestWALWrapAround(t *testing.T) {
	for _, closeCleanly := range []bool{false, true} {
		t.Run(fmt.Sprint("close=", closeCleanly), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "wrap.db")
			var held fault
			opts := Options{WALSize: MinWALSize, CheckpointInterval: noTimer, hooks: &testHooks{beforeCheckpoint: held.get}}
			s := openAt(t, path, opts)
			ctx := context.Background()
			want := map[string]string{}
			const commits, keys = 3000, 37
			for i := range commits {
				k := fmt.Sprint("k", i%keys)
				v := fmt.Sprintf("%d-%s", i, strings.Repeat("x", i%97))
				require.NoError(t, s.Commit(ctx, put("w", k, v), put("u", fmt.Sprint(i), "1")))
				want[k] = v
			}
			st := s.Stats()
			require.GreaterOrEqual(t, st.WALWraps, uint64(3), "%+v", st)
			require.Zero(t, st.DirectBatches)
			t.Logf("%+v", st)
			if closeCleanly {
				require.NoError(t, s.Close())
			} else {
				// Without the hold, a checkpoint between the last Commit and
				// the crash left nothing to replay now and then (under load).
				// A read checkpoints everything first, so the held Commit
				// finds room in the WAL.
				requireValue(t, s, "w", "k0", want["k0"])
				held.set(errors.New("checkpoints held"))
				require.NoError(t, s.Commit(ctx, put("w", "held", "1")))
				want["held"] = "1"
				crash(t, s)
				held.set(nil)
			}

			s = openAt(t, path, opts)
			if closeCleanly {
				require.Zero(t, s.Stats().Recovered)
			} else {
				require.NotZero(t, s.Stats().Recovered)
			}
			for k, v := range want {
				requireValue(t, s, "w", k, v)
			}
			n := 0
			require.NoError(t, s.ForEach("u", func(k, v []byte) error { n++; return nil }))
			require.Equal(t, commits, n)
			require.NoError(t, s.Check())
		})
	}
}

// After a wrap, the records of the previous pass are still in the WAL
// beyond the new ones; they are not part of the chain and a crash does not
// bring their (older) values back. All records have the same size, so a
// record of pass 1 starts exactly where the chain of pass 2 ends.
func TestStaleRecordsNotReplayed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stale.db")
	opts := Options{WALSize: MinWALSize, CheckpointInterval: noTimer}
	s := openAt(t, path, opts)
	ctx := context.Background()
	commit := func(pass, i int) {
		require.NoError(t, s.Commit(ctx, put("s", "k", fmt.Sprintf("pass%d-%05d", pass, i)), put("s", fmt.Sprintf("n%05d", i), "x")))
	}
	i := 0
	for ; s.Stats().WALWraps == 0; i++ {
		commit(1, i)
	}
	// The commit that wrapped is the first record of pass 2.
	for range 3 {
		commit(2, i)
		i++
	}
	crash(t, s)

	chain := readChain(t, path)
	require.Equal(t, 4, len(chain), "the commit that wrapped and three more")
	require.Equal(t, markerLen, chain[0].off, "right after the pass's marker")
	// Pass 1 is still there right after the chain: its records are valid
	// on their own but belong to another pass, and their seqs are older.
	buf, err := os.ReadFile(path + walSuffix)
	require.NoError(t, err)
	end := chain[3].off + walHeaderLen + int64(len(chain[3].payload))
	stale := scanWAL(buf[end:])
	require.NotEmpty(t, stale, "no record of pass 1 right after the chain")
	_, marker := decodeMarker(stale[0].payload)
	require.False(t, marker)
	require.NotEqual(t, chain[0].pass, stale[0].pass)
	require.Less(t, stale[0].seq, chain[0].seq)

	s = openAt(t, path, opts)
	require.EqualValues(t, 4, s.Stats().Recovered)
	requireValue(t, s, "s", "k", fmt.Sprintf("pass2-%05d", i-1))
	requireValue(t, s, "s", fmt.Sprintf("n%05d", i-1), "x")
}

// scanWAL takes only the consecutive records of the first record's pass,
// each with a matching CRC and a length that fits.
func TestScanWALRejectsForeignRecords(t *testing.T) {
	rec := func(pass, seq uint64, payload string) []byte {
		r := append(make([]byte, walHeaderLen), payload...)
		sealRecord(r, pass, seq)
		return r
	}
	base := append(append(rec(7, 5, "a"), rec(7, 6, "bb")...), rec(7, 7, "ccc")...)
	for name, tc := range map[string]struct {
		tail []byte
		want int
	}{
		"next record (control)": {rec(7, 8, "d"), 4},
		"another pass":          {rec(8, 8, "d"), 3},
		"seq gap":               {rec(7, 9, "d"), 3},
		"seq repeated":          {rec(7, 7, "d"), 3},
		"older seq":             {rec(7, 2, "d"), 3},
		"bad CRC": {func() []byte {
			r := rec(7, 8, "d")
			r[walHeaderLen] ^= 1
			return r
		}(), 3},
		"torn": {rec(7, 8, "dddd")[:walHeaderLen+2], 3},
		"length past the end": {func() []byte {
			r := rec(7, 8, "d")
			binary.LittleEndian.PutUint32(r, 1000)
			return r
		}(), 3},
		"zeros":      {make([]byte, 100), 3},
		"zero pass":  {rec(0, 8, "d"), 3},
		"empty tail": {nil, 3},
	} {
		buf := append(append([]byte{}, base...), tc.tail...)
		require.Len(t, scanWAL(buf), tc.want, name)
	}
	require.Empty(t, scanWAL(make([]byte, 1000)))
	require.Empty(t, scanWAL(rec(7, 0, "x")))
}

// A torn last record (the crash hit during its write) is ignored; the
// records before it survive.
func TestTornLastRecordIgnored(t *testing.T) {
	for name, damage := range map[string]func(t *testing.T, wal string, last scannedRecord){
		"garbled payload": func(t *testing.T, wal string, last scannedRecord) {
			f, err := os.OpenFile(wal, os.O_RDWR, 0)
			require.NoError(t, err)
			_, err = f.WriteAt([]byte{0xde, 0xad}, last.off+walHeaderLen+int64(len(last.payload))-2)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		},
		"zeroed tail": func(t *testing.T, wal string, last scannedRecord) {
			f, err := os.OpenFile(wal, os.O_RDWR, 0)
			require.NoError(t, err)
			_, err = f.WriteAt(make([]byte, len(last.payload)/2), last.off+walHeaderLen+int64(len(last.payload)/2))
			require.NoError(t, err)
			require.NoError(t, f.Close())
		},
		"truncated file": func(t *testing.T, wal string, last scannedRecord) {
			require.NoError(t, os.Truncate(wal, last.off+walHeaderLen+int64(len(last.payload))/2))
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "torn.db")
			opts := Options{CheckpointInterval: noTimer}
			s := openAt(t, path, opts)
			ctx := context.Background()
			const n = 10
			for i := range n {
				require.NoError(t, s.Commit(ctx, put("t", fmt.Sprint(i), strings.Repeat("v", 100)), put("t", "last", fmt.Sprint(i))))
			}
			crash(t, s)
			chain := readChain(t, path)
			require.Equal(t, n, len(chain))
			damage(t, path+walSuffix, chain[n-1])

			s = openAt(t, path, opts)
			require.EqualValues(t, n-1, s.Stats().Recovered)
			requireValue(t, s, "t", "last", fmt.Sprint(n-2))
			for i := range n - 1 {
				requireValue(t, s, "t", fmt.Sprint(i), strings.Repeat("v", 100))
			}
			requireAbsent(t, s, "t", fmt.Sprint(n-1))
			// The store goes on from there.
			require.NoError(t, s.Commit(ctx, put("t", "after", "1")))
			crash(t, s)
			s = openAt(t, path, opts)
			requireValue(t, s, "t", "after", "1")
			requireValue(t, s, "t", "last", fmt.Sprint(n-2))
		})
	}
}

// A batch too large for the WAL goes straight to bbolt, after the records
// before it and before the ones after it.
func TestLargeBatchBypassesWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.db")
	opts := Options{WALSize: MinWALSize, CheckpointInterval: noTimer}
	s := openAt(t, path, opts)
	ctx := context.Background()
	big := strings.Repeat("B", MinWALSize/2)
	require.NoError(t, s.Commit(ctx, put("b", "x", "1"), put("b", "y", "1")))
	require.NoError(t, s.Commit(ctx, put("b", "x", "2"), put("b", "big", big), del("b", "y")))
	require.Equal(t, "2", string(dbValue(t, s, "b", "x")), "the large batch is in bbolt when acknowledged")
	require.NoError(t, s.Commit(ctx, put("b", "x", "3")))
	st := s.Stats()
	require.EqualValues(t, 1, st.DirectBatches)
	require.EqualValues(t, 3, st.Txns)
	crash(t, s)

	s = openAt(t, path, opts)
	require.EqualValues(t, 1, s.Stats().Recovered)
	requireValue(t, s, "b", "x", "3")
	requireValue(t, s, "b", "big", big)
	requireAbsent(t, s, "b", "y")
}

// A WAL record whose write failed after its bytes landed (a full disk:
// the store stays usable) is not acknowledged and is overwritten by the
// next, shorter record, which leaves the failed record's tail behind the
// chain (not taken for a chain that ends early, rule 4); if the next batch
// is applied directly instead, the failed record can never be replayed
// over it.
func TestFailedWriteOverwritten(t *testing.T) {
	for _, next := range []string{"small", "large"} {
		t.Run("next="+next, func(t *testing.T) {
			var fail fault
			hooks := &testHooks{afterWrite: fail.get}
			path := filepath.Join(t.TempDir(), "u.db")
			opts := Options{WALSize: MinWALSize, CheckpointInterval: noTimer, hooks: hooks}
			s := openAt(t, path, opts)
			ctx := context.Background()
			require.NoError(t, s.Commit(ctx, put("u", "x", "1")))

			fail.set(errNoSpace)
			err := s.Commit(ctx, put("u", "x", "failed"), put("u", "y", strings.Repeat("u", 200)))
			require.ErrorIs(t, err, syscall.ENOSPC)
			require.NotErrorIs(t, err, ErrUncertain)
			require.NotErrorIs(t, err, ErrFailed)
			require.True(t, strings.HasPrefix(err.Error(), "store: "), err.Error())
			require.EqualValues(t, 1, s.Stats().FailedTxns)
			require.NoError(t, s.Failed())
			fail.set(nil)

			value := "2"
			if next == "large" {
				value = strings.Repeat("L", MinWALSize/2)
			}
			require.NoError(t, s.Commit(ctx, put("u", "x", value)))
			crash(t, s)

			s = openAt(t, path, opts)
			requireValue(t, s, "u", "x", value)
			requireAbsent(t, s, "u", "y")
		})
	}
}

// A failed checkpoint keeps the records pending (they are in the WAL):
// Commits go on while the WAL has room, then fail with the checkpoint's
// error; reads fail too. Once checkpoints work again, so does everything,
// and nothing acknowledged is lost.
func TestCheckpointFailure(t *testing.T) {
	var fail fault
	hooks := &testHooks{beforeCheckpoint: fail.get}
	path := filepath.Join(t.TempDir(), "cf.db")
	opts := Options{WALSize: MinWALSize, CheckpointInterval: 10 * time.Millisecond, hooks: hooks}
	s := openAt(t, path, opts)
	ctx := context.Background()
	fail.set(errNoSpace)

	acked := 0
	var err error
	for ; acked < 1000; acked++ {
		if err = s.Commit(ctx, put("c", fmt.Sprint(acked), strings.Repeat("v", 500))); err != nil {
			break
		}
	}
	require.Error(t, err, "the WAL never filled up")
	require.Greater(t, acked, 50, "Commits must succeed while the WAL has room")
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NotErrorIs(t, err, ErrFailed)
	require.True(t, strings.HasPrefix(err.Error(), "store: "), err.Error())
	require.NotErrorIs(t, err, ErrUncertain)
	require.NotZero(t, s.Stats().FailedCheckpoints)
	_, err = s.Get("c", []byte("0"))
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorIs(t, s.Close(), syscall.ENOSPC)

	// Reopened with checkpoints working: everything acknowledged is there.
	fail.set(nil)
	s = openAt(t, path, opts)
	require.EqualValues(t, acked, s.Stats().Recovered)
	for i := range acked {
		requireValue(t, s, "c", fmt.Sprint(i), strings.Repeat("v", 500))
	}
	requireAbsent(t, s, "c", fmt.Sprint(acked))

	// And a live store recovers by itself once the failure clears.
	fail.set(errNoSpace)
	for err = nil; err == nil; acked++ {
		err = s.Commit(ctx, put("d", fmt.Sprint(acked), strings.Repeat("v", 500)))
	}
	require.ErrorIs(t, err, syscall.ENOSPC)
	fail.set(nil)
	require.NoError(t, s.Commit(ctx, put("d", "after", "1")))
	requireValue(t, s, "d", "after", "1")
	require.NoError(t, s.Check())
}

// The WAL and the database are one: a database created afresh never
// replays a WAL left beside it.
func TestNewDatabaseIgnoresOldWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.db")
	s := openAt(t, path, Options{CheckpointInterval: noTimer})
	require.NoError(t, s.Commit(context.Background(), put("n", "k", "v")))
	crash(t, s)
	require.NoError(t, os.Remove(path))
	s = openAt(t, path, Options{})
	require.Zero(t, s.Stats().Recovered)
	requireAbsent(t, s, "n", "k")
}

// A crash at every write boundary: the last record's write is cut after each
// of its bytes in turn (what follows is what the preallocated file held:
// zeros, or, for a file reused by a later pass, other bytes). Every earlier,
// acknowledged batch is recovered whole; the cut batch, never acknowledged,
// is recovered whole or not at all; the store opens without error and goes
// on (docs/protocol.md §9).
func TestCrashAtEveryByteOfTheLastRecord(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cut.db")
	opts := Options{CheckpointInterval: noTimer}
	s := openAt(t, path, opts)
	ctx := context.Background()
	const n = 6
	for i := range n {
		require.NoError(t, s.Commit(ctx, put("t", fmt.Sprint(i), strings.Repeat("v", 40)), put("t", "last", fmt.Sprint(i))))
	}
	crash(t, s)
	db, err := os.ReadFile(path)
	require.NoError(t, err)
	wal, err := os.ReadFile(path + walSuffix)
	require.NoError(t, err)
	chain := dataRecords(t, scanWAL(wal))
	require.Len(t, chain, n)
	last := chain[n-1]
	end := last.off + walHeaderLen + int64(len(last.payload))

	for _, fill := range []byte{0x00, 0xa5} {
		for cut := last.off; cut <= end; cut++ {
			torn := append([]byte(nil), wal...)
			for i := cut; i < end; i++ {
				torn[i] = fill
			}
			require.NoError(t, os.WriteFile(path, db, 0o600))
			require.NoError(t, os.WriteFile(path+walSuffix, torn, 0o600))

			s := openAt(t, path, opts)
			for i := range n - 1 {
				requireValue(t, s, "t", fmt.Sprint(i), strings.Repeat("v", 40))
			}
			got, err := s.Get("t", []byte("last"))
			require.NoError(t, err)
			whole := cut == end
			if whole {
				require.Equal(t, fmt.Sprint(n-1), string(got), "cut at %d of [%d, %d], fill %#x", cut, last.off, end, fill)
				requireValue(t, s, "t", fmt.Sprint(n-1), strings.Repeat("v", 40))
			} else {
				require.Equal(t, fmt.Sprint(n-2), string(got), "cut at %d of [%d, %d], fill %#x: a partial batch", cut, last.off, end, fill)
				requireAbsent(t, s, "t", fmt.Sprint(n-1))
			}
			require.NoError(t, s.Commit(ctx, put("t", "after", fmt.Sprint(cut))), "the store goes on")
			require.NoError(t, s.Close())
		}
	}
}
