package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// The integrity rules of docs/protocol.md change 69, (1) to (4) and the
// store of before, at Open. Each test damages the files the way a disk
// does and shows that Open refuses them, naming what it found.

// sampleBuckets are buckets like the server's, each with a few values.
var sampleBuckets = []string{"hw", "hwj", "meta", "spoke", "ttl"}

// writeSample commits a few values into every sample bucket and closes
// the store cleanly; it returns bucket → key → value.
func writeSample(t testing.TB, path string) map[string]map[string]string {
	t.Helper()
	s := openAt(t, path, Options{})
	want := map[string]map[string]string{}
	for i, b := range sampleBuckets {
		want[b] = map[string]string{}
		var ops []Op
		for j := range 5 {
			k := string(binary.BigEndian.AppendUint64([]byte{byte(j)}, uint64(i*100+j)))
			v := fmt.Sprintf("%s-value-%d-%s", b, j, strings.Repeat("x", j*40))
			ops = append(ops, Op{Bucket: b, Key: []byte(k), Value: []byte(v)})
			want[b][k] = v
		}
		require.NoError(t, s.Commit(context.Background(), ops...))
	}
	require.NoError(t, s.Close())
	return want
}

// editBolt changes the closed bbolt file at path with bbolt itself, as a
// disk would change its bytes: the store's tags and digest are not
// touched.
func editBolt(t testing.TB, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(fn))
	require.NoError(t, db.Close())
}

// stored returns bucket/key as bbolt holds it (value ‖ tag).
func stored(t testing.TB, path, bucket, key string) []byte {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var out []byte
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		out = bytes.Clone(tx.Bucket([]byte(bucket)).Get([]byte(key)))
		return nil
	}))
	require.NotNil(t, out, "%s/%x", bucket, key)
	return out
}

// firstKey is the first key of bucket in want, in key order.
func firstKey(want map[string]map[string]string, bucket string) string {
	var first string
	for k := range want[bucket] {
		if first == "" || k < first {
			first = k
		}
	}
	return first
}

// requireRefused opens path and requires Open to refuse it with an
// integrity finding (ErrFailed, ErrCorrupt) about file, and, if bucket is
// not empty, about bucket and key; it returns the finding.
func requireRefused(t testing.TB, path, file, bucket, key string) *IntegrityError {
	t.Helper()
	s, err := Open(path, Options{Logger: quiet})
	if err == nil {
		_ = s.Close()
	}
	require.Error(t, err, "Open took a damaged file")
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, err, ErrCorrupt)
	require.True(t, strings.HasPrefix(err.Error(), "store: "), err.Error())
	var ie *IntegrityError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, file, ie.File, "%v", err)
	require.Contains(t, err.Error(), file)
	if bucket != "" {
		require.Equal(t, bucket, ie.Bucket, "%v", err)
		require.Equal(t, []byte(key), ie.Key, "%v", err)
		require.Contains(t, err.Error(), fmt.Sprintf("bucket %q key %x", bucket, key))
	}
	return ie
}

// Rule 1: one bit flipped inside one value, in the value or its tag, in
// every bucket, store.wal's own keys included; and a value cut short.
func TestOpenRefusesFlippedBit(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, "clean.db")
	want := writeSample(t, clean)
	raw, err := os.ReadFile(clean)
	require.NoError(t, err)
	wal, err := os.ReadFile(clean + walSuffix)
	require.NoError(t, err)

	type target struct{ bucket, key string }
	var targets []target
	for _, b := range sampleBuckets {
		targets = append(targets, target{b, firstKey(want, b)})
	}
	for _, k := range []string{walAppliedKey, walDigestKey, walFormatKey} {
		targets = append(targets, target{walBucket, k})
	}
	for _, tg := range targets {
		for _, where := range []string{"value", "tag", "cut"} {
			t.Run(tg.bucket+"/"+where, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "bq.db")
				require.NoError(t, os.WriteFile(path, raw, 0o600))
				require.NoError(t, os.WriteFile(path+walSuffix, wal, 0o600))
				v := stored(t, path, tg.bucket, tg.key)
				switch where {
				case "value":
					v[0] ^= 0x10
				case "tag":
					v[len(v)-1] ^= 0x01
				case "cut":
					v = v[:tagLen-1]
				}
				editBolt(t, path, func(tx *bolt.Tx) error { return tx.Bucket([]byte(tg.bucket)).Put([]byte(tg.key), v) })
				requireRefused(t, path, path, tg.bucket, tg.key)
			})
		}
	}
}

// Rule 1: a value written under another key of its bucket, or under its
// own key in another bucket (a misdirected write), fails its tag.
func TestOpenRefusesMisdirectedValue(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, "clean.db")
	want := writeSample(t, clean)
	keys := func(b string) []string {
		var ks []string
		for k := range want[b] {
			ks = append(ks, k)
		}
		return ks
	}
	for name, swap := range map[string]func(tx *bolt.Tx) (bucket, key string){
		"two keys of one bucket swapped": func(tx *bolt.Tx) (string, string) {
			b := tx.Bucket([]byte("hw"))
			ks := keys("hw")
			a, c := bytes.Clone(b.Get([]byte(ks[0]))), bytes.Clone(b.Get([]byte(ks[1])))
			require.NoError(t, b.Put([]byte(ks[0]), c))
			require.NoError(t, b.Put([]byte(ks[1]), a))
			return "hw", min(ks[0], ks[1])
		},
		"a value copied to another bucket": func(tx *bolt.Tx) (string, string) {
			k := firstKey(want, "meta")
			v := bytes.Clone(tx.Bucket([]byte("meta")).Get([]byte(k)))
			require.NoError(t, tx.Bucket([]byte("ttl")).Put([]byte(k), v))
			return "ttl", k
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bq.db")
			copyStore(t, clean, path)
			var bucket, key string
			editBolt(t, path, func(tx *bolt.Tx) error { bucket, key = swap(tx); return nil })
			requireRefused(t, path, path, bucket, key)
		})
	}
}

func copyStore(t testing.TB, from, to string) {
	t.Helper()
	for _, suffix := range []string{"", walSuffix} {
		b, err := os.ReadFile(from + suffix)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(to+suffix, b, 0o600))
	}
}

// Rule 2: values whose tags verify but that are not what the last
// transaction left: an older version of a value (a stale page), a value
// lost, a deleted value back. Only the digest finds them.
func TestOpenRefusesStaleValues(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, "clean.db")
	s := openAt(t, clean, Options{})
	ctx := context.Background()
	require.NoError(t, s.Commit(ctx, put("hw", "k", "version 1"), put("hw", "gone", "deleted later"), put("ttl", "t", "1")))
	requireValue(t, s, "hw", "k", "version 1") // checkpointed: in bbolt
	old := dbStored(t, s, "hw", "k")
	gone := dbStored(t, s, "hw", "gone")
	require.NoError(t, s.Commit(ctx, put("hw", "k", "version 2"), del("hw", "gone")))
	require.NoError(t, s.Close())

	for name, edit := range map[string]func(b *bolt.Bucket) error{
		"older version": func(b *bolt.Bucket) error { return b.Put([]byte("k"), old) },
		"value lost":    func(b *bolt.Bucket) error { return b.Delete([]byte("k")) },
		"deleted back":  func(b *bolt.Bucket) error { return b.Put([]byte("gone"), gone) },
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bq.db")
			copyStore(t, clean, path)
			editBolt(t, path, func(tx *bolt.Tx) error { return edit(tx.Bucket([]byte("hw"))) })
			ie := requireRefused(t, path, path, "", "")
			require.Contains(t, ie.Reason, "digest")
		})
	}
	// The same edits through the store's own sealing, digest kept in
	// step, are no damage.
	path := filepath.Join(t.TempDir(), "bq.db")
	copyStore(t, clean, path)
	editBolt(t, path, func(tx *bolt.Tx) error {
		w, err := beginSealed(tx, path)
		require.NoError(t, err)
		require.NoError(t, w.apply([]Op{put("hw", "k", "version 3"), del("ttl", "t")}))
		return w.finish(w.state.applied)
	})
	s = openAt(t, path, Options{})
	requireValue(t, s, "hw", "k", "version 3")
	requireAbsent(t, s, "ttl", "t")
	require.NoError(t, s.Check())
}

// dbStored reads bucket/key as bbolt holds it (value ‖ tag) from the open
// store's file.
func dbStored(t testing.TB, s *Store, bucket, key string) []byte {
	t.Helper()
	var out []byte
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		out = bytes.Clone(tx.Bucket([]byte(bucket)).Get([]byte(key)))
		return nil
	}))
	require.NotNil(t, out)
	return out
}

// Rule 3: a bbolt file that went back (a lost write of its meta page, or
// a copy of an older file put in its place) below the WAL's marker is
// refused. Without the marker, Open would replay the WAL's pass over the
// old file and lose, silently, what the passes in between had brought.
func TestOpenRefusesBoltBehindMarker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bq.db")
	ctx := context.Background()
	s := openAt(t, path, Options{CheckpointInterval: noTimer})
	require.NoError(t, s.Commit(ctx, put("hw", "a", "1")))
	require.NoError(t, s.Close())
	old, err := os.ReadFile(path) // applied: a's record
	require.NoError(t, err)

	s = openAt(t, path, Options{CheckpointInterval: noTimer})
	require.NoError(t, s.Commit(ctx, put("hw", "b", "2"))) // only in this file, once closed
	require.NoError(t, s.Close())
	s = openAt(t, path, Options{CheckpointInterval: noTimer})
	require.NoError(t, s.Commit(ctx, put("hw", "c", "3"))) // the pass's marker says b is applied
	crash(t, s)

	require.NoError(t, os.WriteFile(path, old, 0o600))
	ie := requireRefused(t, path, path, "", "")
	require.Contains(t, ie.Reason, "below")
}

// Rule 3: a bbolt file whose applied is the marker's must have the
// marker's digest, even if it is consistent in itself (its tags and its
// digest agree): here, another file written by the store's own code.
func TestOpenRefusesOtherFileAtMarker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bq.db")
	ctx := context.Background()
	s := openAt(t, path, Options{CheckpointInterval: noTimer})
	require.NoError(t, s.Commit(ctx, put("hw", "a", "1")))
	require.NoError(t, s.Close())
	s = openAt(t, path, Options{CheckpointInterval: noTimer})
	require.NoError(t, s.Commit(ctx, put("hw", "b", "2"))) // a marker with a's state
	crash(t, s)

	editBolt(t, path, func(tx *bolt.Tx) error {
		w, err := beginSealed(tx, path)
		require.NoError(t, err)
		require.NoError(t, w.apply([]Op{put("hw", "a", "another 1")}))
		return w.finish(w.state.applied) // applied unchanged
	})
	ie := requireRefused(t, path, path, "", "")
	require.Contains(t, ie.Reason, "marker")
}

// Rule 4: a record damaged in the middle of a chain, with records of its
// pass after it, is corruption, not a torn tail: Open refuses it instead
// of dropping the acknowledged records after it. So is a damaged marker,
// which would leave no chain at all.
func TestOpenRefusesEarlyChainEnd(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, "clean.db")
	opts := Options{CheckpointInterval: noTimer}
	s := openAt(t, clean, opts)
	ctx := context.Background()
	const n = 8
	for i := range n {
		require.NoError(t, s.Commit(ctx, put("hw", fmt.Sprint(i), strings.Repeat("v", 60))))
	}
	crash(t, s)
	wal, err := os.ReadFile(clean + walSuffix)
	require.NoError(t, err)
	chain := scanWAL(wal)
	require.Len(t, chain, n+1)

	for name, off := range map[string]int64{
		"payload of a middle record":      chain[n/2].off + walHeaderLen + 5,
		"header of a middle record":       chain[n/2].off + 1,
		"the first record after a marker": chain[1].off + walHeaderLen + 3,
		"payload of the marker":           chain[0].off + walHeaderLen + 20,
		"pass id of the marker":           chain[0].off + 9,
		"length of the marker":            chain[0].off,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bq.db")
			copyStore(t, clean, path)
			damaged := bytes.Clone(wal)
			damaged[off] ^= 0x04
			require.NoError(t, os.WriteFile(path+walSuffix, damaged, 0o600))
			ie := requireRefused(t, path, path+walSuffix, "", "")
			require.Contains(t, ie.Reason, "ends early")
		})
	}
	// The last record damaged is a torn tail: it was never acknowledged
	// if a crash tore it, and nothing says otherwise (TestTornLastRecordIgnored).
	path := filepath.Join(t.TempDir(), "bq.db")
	copyStore(t, clean, path)
	damaged := bytes.Clone(wal)
	damaged[chain[n].off+walHeaderLen+5] ^= 0x04
	require.NoError(t, os.WriteFile(path+walSuffix, damaged, 0o600))
	s = openAt(t, path, opts)
	require.EqualValues(t, n-1, s.Stats().Recovered)
	requireAbsent(t, s, "hw", fmt.Sprint(n-1))
}

// The store of before: a bbolt file written without tags (no format
// mark), with a WAL of records not applied yet, is sealed at its first
// Open, then read and replayed as any other; the next Open finds it
// sealed. A sealed file that lost its format mark is not sealed again.
func TestOpenSealsFileOfBefore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bq.db")
	want := map[string]map[string]string{
		"hw":    {"\x00\x01": "hw value", "\xff": ""},
		"meta":  {"incarnation": "\x00\x00\x00\x00\x00\x00\x00\x07"},
		"empty": {},
	}
	// The format of before, written with bbolt: applied is 8 bytes, no
	// tags, no digest, no format mark.
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for b, kvs := range want {
			bk, err := tx.CreateBucket([]byte(b))
			require.NoError(t, err)
			for k, v := range kvs {
				require.NoError(t, bk.Put([]byte(k), []byte(v)))
			}
		}
		wb, err := tx.CreateBucket([]byte(walBucket))
		require.NoError(t, err)
		return wb.Put([]byte(walAppliedKey), binary.BigEndian.AppendUint64(nil, 41))
	}))
	require.NoError(t, db.Close())
	// A WAL of before: records 41 (applied) and 42 (not yet), no marker.
	wal := make([]byte, DefaultWALSize)
	off := 0
	for _, r := range []struct {
		seq uint64
		ops []Op
	}{{41, []Op{put("hw", "old", "applied already")}}, {42, []Op{put("hw", "new", "replayed"), del("meta", "incarnation")}}} {
		rec := encodeRecord([]*request{{ops: r.ops}})
		sealRecord(rec, 99, r.seq)
		off += copy(wal[off:], rec)
	}
	require.NoError(t, os.WriteFile(path+walSuffix, wal, 0o600))

	s := openAt(t, path, Options{})
	require.EqualValues(t, 3, s.Stats().Sealed)
	require.EqualValues(t, 1, s.Stats().Recovered)
	requireValue(t, s, "hw", "\x00\x01", "hw value")
	requireValue(t, s, "hw", "\xff", "")
	requireValue(t, s, "hw", "new", "replayed")
	requireAbsent(t, s, "hw", "old")
	requireAbsent(t, s, "meta", "incarnation")
	require.NoError(t, s.Check())
	require.NoError(t, s.Commit(context.Background(), put("hw", "after", "1")))
	require.NoError(t, s.Close())

	s = openAt(t, path, Options{})
	require.Zero(t, s.Stats().Sealed, "sealed once")
	requireValue(t, s, "hw", "after", "1")
	require.NoError(t, s.Close())
	require.Equal(t, []byte("hw value"), stored(t, path, "hw", "\x00\x01")[:8], "sealed in place: value ‖ tag")

	// A sealed file without its format mark shows that it was sealed: it
	// is refused, not sealed again over a value that may be damaged.
	sealedCopy := filepath.Join(t.TempDir(), "bq.db")
	copyStore(t, path, sealedCopy)
	editBolt(t, sealedCopy, func(tx *bolt.Tx) error { return tx.Bucket([]byte(walBucket)).Delete([]byte(walFormatKey)) })
	requireRefused(t, sealedCopy, sealedCopy, walBucket, walAppliedKey)
}

// A random bit flipped anywhere in a bbolt file, or in its WAL's chain but
// its last record: Open refuses the files, or reads exactly what was
// committed (the bit was in bytes that hold nothing: free pages, padding).
// It never serves a changed value (the experiment: 19 of 30
// random flips started with no complaint, on changed state for some).
func TestRandomBitFlips(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, "clean.db")
	opts := Options{CheckpointInterval: noTimer, WALSize: MinWALSize}
	s := openAt(t, clean, opts)
	ctx := context.Background()
	want := map[string]map[string]string{}
	rng := rand.New(rand.NewPCG(57, 69))
	for i := range 300 {
		b := sampleBuckets[i%len(sampleBuckets)]
		k := fmt.Sprintf("key-%04d", rng.IntN(2000))
		v := strings.Repeat(fmt.Sprint(i), 1+rng.IntN(120))
		if want[b] == nil {
			want[b] = map[string]string{}
		}
		want[b][k] = v
		require.NoError(t, s.Commit(ctx, put(b, k, v)))
		if i == 250 {
			requireValue(t, s, b, k, v) // a checkpoint: the last 49 stay in the WAL only
		}
	}
	crash(t, s)
	db, err := os.ReadFile(clean)
	require.NoError(t, err)
	wal, err := os.ReadFile(clean + walSuffix)
	require.NoError(t, err)
	// The WAL's chain but its last record: a damaged last record cannot
	// be told from one torn by a crash, and is dropped (the package doc,
	// "What a disk can still do").
	walUsed := int(dataRecords(t, scanWAL(wal))[47].end())

	flips := 300
	if testing.Short() {
		flips = 60
	}
	refused, served := 0, 0
	for i := range flips {
		file, content := clean, db
		if i%3 == 2 {
			file, content = clean+walSuffix, wal
		}
		damaged := bytes.Clone(content)
		at := rng.IntN(len(damaged))
		if file != clean {
			at = rng.IntN(walUsed)
		}
		damaged[at] ^= 1 << rng.IntN(8)
		path := filepath.Join(t.TempDir(), "bq.db")
		copyStore(t, clean, path)
		require.NoError(t, os.WriteFile(path+strings.TrimPrefix(file, clean), damaged, 0o600))

		s, err := Open(path, Options{Logger: quiet, CheckpointInterval: noTimer, WALSize: MinWALSize})
		if err != nil {
			require.ErrorIs(t, err, ErrFailed, "flip at %d of %s", at, file)
			require.ErrorIs(t, err, ErrCorrupt, "flip at %d of %s", at, file)
			refused++
			continue
		}
		served++
		for b, kvs := range want {
			got := map[string]string{}
			require.NoError(t, s.ForEach(b, func(k, v []byte) error { got[string(k)] = string(v); return nil }),
				"flip at %d of %s", at, file)
			require.Equal(t, kvs, got, "flip at %d of %s: bucket %s changed", at, file, b)
			for k, v := range kvs {
				requireValue(t, s, b, k, v)
			}
		}
		require.NoError(t, s.Close())
	}
	t.Logf("%d random bit flips: %d refused, %d read back exactly what was committed", flips, refused, served)
	require.NotZero(t, refused)
}

// A damaged key in a branch page sends Get to the wrong leaf: it answers
// "absent" for a key that is there, and no tag is read to say otherwise.
// bbolt's own check at Open finds it (keys of a leaf below the branch
// key that leads to it).
func TestOpenRefusesDamagedBranchKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bq.db")
	s := openAt(t, path, Options{})
	var ops []Op
	for i := range 200 {
		ops = append(ops, put("hw", fmt.Sprintf("key-%04d", i), strings.Repeat("v", 100)))
	}
	require.NoError(t, s.Commit(context.Background(), ops...))
	require.NoError(t, s.Close())

	// The first branch page; its second key, made larger than every key.
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	pageSize := db.Info().PageSize
	var branch int
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		for id := 2; ; id++ {
			p, err := tx.Page(id)
			require.NoError(t, err)
			require.NotNil(t, p, "no branch page")
			if p.Type == "branch" && p.Count >= 2 {
				branch = id
				return nil
			}
		}
	}))
	require.NoError(t, db.Close())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	const pageHeader, branchElement = 16, 16
	elem := branch*pageSize + pageHeader + branchElement // element 1
	keyAt := elem + int(binary.LittleEndian.Uint32(raw[elem:]))
	require.Equal(t, "key-", string(raw[keyAt:keyAt+4]))
	raw[keyAt] ^= 0x80
	require.NoError(t, os.WriteFile(path, raw, 0o600))

	// What bbolt alone makes of it: a key that is there, not found.
	db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	missed := 0
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("hw"))
		return b.ForEach(func(k, v []byte) error {
			if b.Get(k) == nil {
				missed++
			}
			return nil
		})
	}))
	require.NoError(t, db.Close())
	require.NotZero(t, missed, "the damage should hide keys from Get")

	ie := requireRefused(t, path, path, "", "")
	require.Contains(t, ie.Reason, "bbolt's check")
}

// Rule 3: a chain with records not in bbolt begins with its marker, and a
// marker is never found inside a chain. WALs written by hand: records the
// writer never writes.
func TestOpenRefusesMarkerOutOfPlace(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, "clean.db")
	s := openAt(t, clean, Options{})
	require.NoError(t, s.Commit(context.Background(), put("hw", "a", "1")))
	require.NoError(t, s.Close())
	var st fileState
	db, err := bolt.Open(clean, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, db.View(func(tx *bolt.Tx) (err error) { st, err = readSealedState(tx, clean, newSealer()); return err }))
	require.NoError(t, db.Close())

	data := func(ops ...Op) []byte { return encodeRecord([]*request{{ops: ops}}) }
	for name, recs := range map[string][][]byte{
		"no marker":           {data(put("hw", "b", "2")), data(put("hw", "c", "3"))},
		"a marker in a chain": {encodeMarker(st), data(put("hw", "b", "2")), encodeMarker(st), data(put("hw", "c", "3"))},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bq.db")
			copyStore(t, clean, path)
			wal := make([]byte, DefaultWALSize)
			off := 0
			for i, rec := range recs {
				sealRecord(rec, 7, st.applied+1+uint64(i))
				off += copy(wal[off:], rec)
			}
			require.NoError(t, os.WriteFile(path+walSuffix, wal, 0o600))
			ie := requireRefused(t, path, path+walSuffix, "", "")
			require.Contains(t, ie.Reason, "marker")
		})
	}
}

// Get and ForEach check the tag of what they read on a running store: a
// bit flipped behind its back is never served, and fails the store.
func TestReadsCheckTags(t *testing.T) {
	for _, read := range []string{"Get", "ForEach"} {
		t.Run(read, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "read.db")
			s := openAt(t, path, Options{})
			ctx := context.Background()
			const victim = "a value nobody else has, read after it rots"
			require.NoError(t, s.Commit(ctx, put("meta", "a", "1"), put("meta", "victim", victim), put("meta", "z", "2")))
			requireValue(t, s, "meta", "victim", victim)
			flipInFile(t, path, []byte(victim))

			var err error
			switch read {
			case "Get":
				var v []byte
				v, err = s.Get("meta", []byte("victim"))
				require.Nil(t, v)
			case "ForEach":
				var seen []string
				err = s.ForEach("meta", func(k, v []byte) error {
					seen = append(seen, string(k))
					return nil
				})
				require.Equal(t, []string{"a"}, seen, "fn saw the damaged value or what follows it")
			}
			require.ErrorIs(t, err, ErrFailed)
			require.ErrorIs(t, err, ErrCorrupt)
			var ie *IntegrityError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, "meta", ie.Bucket)
			require.Equal(t, []byte("victim"), ie.Key)
			requireFailedForGood(t, s, ErrCorrupt)
		})
	}
}

// flipInFile flips one bit (of its fourth byte) in every copy of needle in
// the file at path, through a file descriptor of its own.
func flipInFile(t testing.TB, path string, needle []byte) {
	t.Helper()
	flipped := bytes.Clone(needle)
	flipped[3] ^= 0x01
	replaceInFile(t, path, needle, flipped)
}
