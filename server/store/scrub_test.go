package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// The scrub (docs/protocol.md change 69, rule 6): every value once a pass,
// in chunks; a bad tag, or at the end of a quiet pass a digest that does
// not add up, fails the store.

// scrubbedValue is one value Scrub checked, as the scrubbed hook saw it.
type scrubbedValue struct{ bucket, key string }

// fileValues lists every value of the open store's bbolt file, store.wal's
// included, in the order a pass visits them, and the bytes they take as
// stored.
func fileValues(t testing.TB, s *Store) (values []scrubbedValue, nbytes uint64) {
	t.Helper()
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				values = append(values, scrubbedValue{string(name), string(k)})
				nbytes += uint64(len(v))
				return nil
			})
		})
	}))
	return values, nbytes
}

// scrubPass calls Scrub(chunk) until a pass ends (at most limit calls) and
// returns the progress after each call.
func scrubPass(t testing.TB, s *Store, chunk, limit int) []ScrubProgress {
	t.Helper()
	before, err := s.Scrub(0)
	require.NoError(t, err)
	var out []ScrubProgress
	for range limit {
		p, err := s.Scrub(chunk)
		require.NoError(t, err)
		out = append(out, p)
		if p.Passes > before.Passes {
			require.Equal(t, before.Passes+1, p.Passes)
			return out
		}
	}
	t.Fatalf("no pass ended in %d calls of Scrub(%d): %+v", limit, chunk, out[len(out)-1])
	return nil
}

// Each value, in every bucket, store.wal's included, is checked exactly
// once a pass, whatever the chunk size, the pass resuming after the last
// key checked across buckets; a pass ends, Passes counts it, Checked
// starts again, and Bytes counts the values as stored.
func TestScrubChecksEachValueOncePerPass(t *testing.T) {
	var seen []scrubbedValue
	hooks := &testHooks{scrubbed: func(bucket string, key []byte) {
		seen = append(seen, scrubbedValue{bucket, string(key)})
	}}
	s := openTest(t, Options{CheckpointInterval: noTimer, hooks: hooks})
	ctx := context.Background()
	for i, b := range []string{"a", "bb", "c", "d"} {
		var ops []Op
		for j := range 3 + 4*i {
			ops = append(ops, put(b, fmt.Sprintf("k%03d", j), strings.Repeat("v", j)))
		}
		require.NoError(t, s.Commit(ctx, ops...))
	}
	// A bucket left empty, between two others.
	require.NoError(t, s.Commit(ctx, put("b", "gone", "1")))
	require.NoError(t, s.Commit(ctx, del("b", "gone")))
	requireValue(t, s, "a", "k000", "") // a checkpoint: every value in bbolt
	want, wantBytes := fileValues(t, s)
	require.Len(t, want, 3+7+11+15+3)

	var bytesSoFar uint64
	for _, chunk := range []int{1, 2, 3, 7, len(want) - 1, len(want), 1000} {
		t.Run(fmt.Sprint("chunk=", chunk), func(t *testing.T) {
			for pass := range 2 {
				seen = nil
				progress := scrubPass(t, s, chunk, 2*len(want)+2)
				require.Equal(t, want, seen, "pass %d: each value once, in order", pass)
				for i, p := range progress[:len(progress)-1] {
					require.EqualValues(t, (i+1)*chunk, p.Checked, "values checked in the pass so far")
				}
				last := progress[len(progress)-1]
				require.Zero(t, last.Checked, "a new pass begins")
				require.Len(t, progress, (len(want)+chunk-1)/chunk, "a call never runs past a pass's end, and the pass ends with its last value")
				bytesSoFar += wantBytes
				require.Equal(t, bytesSoFar, last.Bytes)
			}
		})
	}
	p, err := s.Scrub(0)
	require.NoError(t, err)
	require.EqualValues(t, 14, p.Passes)
	_, err = s.Scrub(-1)
	require.ErrorIs(t, err, ErrInvalid)

	require.NoError(t, s.Close())
	_, err = s.Scrub(10)
	require.ErrorIs(t, err, ErrClosed)
}

// A bit flipped in a cold value, one no Get or ForEach reads: the scrub
// finds it, names it, and the store fails for good.
func TestScrubFindsRotInColdValue(t *testing.T) {
	var seen []scrubbedValue
	hooks := &testHooks{scrubbed: func(bucket string, key []byte) {
		seen = append(seen, scrubbedValue{bucket, string(key)})
	}}
	s := openTest(t, Options{CheckpointInterval: noTimer, hooks: hooks})
	ctx := context.Background()
	const cold = "a value nobody reads until the next restart"
	var ops []Op
	for i := range 30 {
		ops = append(ops, put("hw", fmt.Sprintf("key-%02d", i), fmt.Sprint("hot value ", i)))
	}
	require.NoError(t, s.Commit(ctx, ops...))
	require.NoError(t, s.Commit(ctx, put("meta", "a", "1"), put("meta", "cold", cold), put("meta", "z", "2")))
	requireValue(t, s, "hw", "key-00", "hot value 0") // a checkpoint: the cold value is in bbolt
	scrubPass(t, s, 4, 100)                           // a clean pass finds nothing

	seen = nil
	flipInFile(t, s.path, []byte(cold))
	var err error
	var p ScrubProgress
	for range 100 {
		if p, err = s.Scrub(4); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, err, ErrCorrupt)
	var ie *IntegrityError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, s.path, ie.File)
	require.Equal(t, "meta", ie.Bucket)
	require.Equal(t, []byte("cold"), ie.Key)
	require.Equal(t, scrubbedValue{"meta", "a"}, seen[len(seen)-1], "the scrub checked the values before the cold one")
	require.NotContains(t, seen, scrubbedValue{"meta", "cold"})
	again, err := s.Scrub(0)
	require.ErrorIs(t, err, ErrFailed)
	require.Equal(t, p, again, "the progress up to the bad value")

	// For good: the scrub, and everything else, keeps saying so.
	requireFailedForGood(t, s, ErrCorrupt)
	require.ErrorAs(t, s.Failed(), &ie)
	require.Equal(t, []byte("cold"), ie.Key)
	n := len(seen)
	_, err = s.Scrub(100)
	require.ErrorIs(t, err, ErrFailed)
	require.Len(t, seen, n, "a failed store scrubbed again")
	require.ErrorIs(t, s.Close(), ErrFailed)
}

func must(p ScrubProgress, err error) ScrubProgress {
	if err != nil {
		panic(err)
	}
	return p
}

// A stale value, an older version whose tag verifies (a lost write of its
// page, here put back behind the running store's back): no tag finds it,
// but at the end of a pass in which the file did not change, the digest
// of the values the scrub saw is not the one stored.
func TestScrubComparesDigestOfQuietPass(t *testing.T) {
	s := openTest(t, Options{CheckpointInterval: noTimer})
	ctx := context.Background()
	require.NoError(t, s.Commit(ctx, put("hw", "k", "version 1"), put("ttl", "t", "1")))
	requireValue(t, s, "hw", "k", "version 1")
	old := dbStored(t, s, "hw", "k")
	require.NoError(t, s.Commit(ctx, put("hw", "k", "version 2")))
	requireValue(t, s, "hw", "k", "version 2")
	current := dbStored(t, s, "hw", "k")
	scrubPass(t, s, 2, 100)

	replaceInFile(t, s.path, current, old)
	// What Get serves: a read checks the tag, which verifies; the digest
	// is checked by Open and by the scrub.
	requireValue(t, s, "hw", "k", "version 1")
	var err error
	for range 100 {
		if _, err = s.Scrub(2); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, err, ErrCorrupt)
	var ie *IntegrityError
	require.ErrorAs(t, err, &ie)
	require.Contains(t, ie.Reason, "digest")
	requireFailedForGood(t, s, ErrCorrupt)
}

// replaceInFile overwrites every copy of from in the file at path with to
// (as long), through a file descriptor of its own.
func replaceInFile(t testing.TB, path string, from, to []byte) {
	t.Helper()
	require.Len(t, to, len(from))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	n := 0
	for at := 0; ; {
		i := bytes.Index(raw[at:], from)
		if i < 0 {
			break
		}
		_, err := f.WriteAt(to, int64(at+i))
		require.NoError(t, err)
		at += i + len(from)
		n++
	}
	require.NotZero(t, n, "not in the file")
}

// Commits and checkpoints during a pass: the pass still ends, every value
// present for the whole pass is checked once, and no digest is compared
// over chunks of different versions of the file (no false alarm).
func TestScrubWhileWriting(t *testing.T) {
	seen := map[scrubbedValue]int{}
	hooks := &testHooks{scrubbed: func(bucket string, key []byte) {
		seen[scrubbedValue{bucket, string(key)}]++
	}}
	s := openTest(t, Options{CheckpointInterval: noTimer, hooks: hooks})
	ctx := context.Background()
	var ops []Op
	for i := range 40 {
		ops = append(ops, put("hw", fmt.Sprintf("stay-%02d", i), "v"))
	}
	require.NoError(t, s.Commit(ctx, ops...))
	requireValue(t, s, "hw", "stay-00", "v")
	for pass := range 3 {
		clear(seen)
		before := must(s.Scrub(0))
		for i := 0; must(s.Scrub(0)).Passes == before.Passes; i++ {
			require.Less(t, i, 200, "the pass does not end")
			_, err := s.Scrub(3)
			require.NoError(t, err)
			// A write of every kind between two chunks, applied to bbolt.
			require.NoError(t, s.Commit(ctx, put("hw", fmt.Sprintf("new-%d-%03d", pass, i), "n"),
				put("ttl", fmt.Sprint(i%5), fmt.Sprint(i)), del("hw", fmt.Sprintf("new-%d-%03d", pass, i-2))))
			requireValue(t, s, "hw", "stay-00", "v")
		}
		for i := range 40 {
			require.Equal(t, 1, seen[scrubbedValue{"hw", fmt.Sprintf("stay-%02d", i)}], "pass %d, stay-%02d", pass, i)
		}
	}
	require.NoError(t, s.Failed())
	require.NoError(t, s.Check())
}
