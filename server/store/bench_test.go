package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Durable writes per second: each write is one 8-byte key and a 128-byte
// value, acknowledged only after fsync. Compare
//
//	BenchmarkCommit/writers=N  this package's group commit
//	BenchmarkBoltUpdate/...    a bbolt Update (transaction + fsync) per write
//	BenchmarkBoltBatch/...     bbolt's Batch (groups writes, waits up to 10 ms)
//
// Run with: go test -run '^$' -bench . -benchtime 3s ./server/store/
var benchValue = make([]byte, 128)

// runWriters runs b.N writes from writers goroutines, each calling write
// with a distinct sequence number, and reports writes/s.
func runWriters(b *testing.B, writers int, write func(seq uint64) error) {
	b.Helper()
	var next atomic.Uint64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range writers {
		wg.Go(func() {
			for {
				seq := next.Add(1)
				if seq > uint64(b.N) {
					return
				}
				if err := write(seq); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func benchKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func BenchmarkCommit(b *testing.B) {
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s := openAt(b, filepath.Join(b.TempDir(), "bench.db"), Options{})
			ctx := context.Background()
			runWriters(b, writers, func(seq uint64) error {
				return s.Commit(ctx, Op{Bucket: "bench", Key: benchKey(seq), Value: benchValue})
			})
			st := s.Stats()
			b.ReportMetric(float64(st.Ops)/float64(max(st.Txns, 1)), "ops/txn")
			b.ReportMetric(0, "ns/op") // ops/s says it better
		})
	}
}

func openBoltBench(b *testing.B) *bolt.DB {
	b.Helper()
	db, err := bolt.Open(filepath.Join(b.TempDir(), "bolt.db"), 0o600, &bolt.Options{FreelistType: bolt.FreelistMapType})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	return db
}

func boltPut(seq uint64) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists([]byte("bench"))
		if err != nil {
			return err
		}
		return bk.Put(benchKey(seq), benchValue)
	}
}

func BenchmarkBoltUpdate(b *testing.B) {
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			db := openBoltBench(b)
			runWriters(b, writers, func(seq uint64) error { return db.Update(boltPut(seq)) })
			b.ReportMetric(0, "ns/op")
		})
	}
}

func BenchmarkBoltBatch(b *testing.B) {
	for _, writers := range []int{8, 16} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			db := openBoltBench(b)
			runWriters(b, writers, func(seq uint64) error { return db.Batch(boltPut(seq)) })
			b.ReportMetric(0, "ns/op")
		})
	}
}

// fillBench writes values 128-byte values in four buckets into a new store
// at path, 1000 per Commit, and closes it cleanly.
func fillBench(b *testing.B, path string, values int) {
	b.Helper()
	s, err := Open(path, Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	buckets := []string{"a", "b", "c", "d"}
	const perCommit = 1000
	for i := 0; i < values; i += perCommit {
		ops := make([]Op, 0, perCommit)
		for j := i; j < min(i+perCommit, values); j++ {
			ops = append(ops, Op{Bucket: buckets[j%len(buckets)], Key: benchKey(uint64(j)), Value: benchValue})
		}
		if err := s.Commit(ctx, ops...); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}

// Open of a store that holds many values: what a restart pays before the
// server can serve. The WAL holds nothing to replay (the store was closed
// cleanly), so this is the bbolt file's own cost at Open: since change 69,
// checking every tag, the digest and bbolt's own check.
//
//	go test -run '^$' -bench BenchmarkOpen -benchtime 10x ./server/store/
func BenchmarkOpen(b *testing.B) {
	for _, values := range []int{100_000} {
		b.Run(fmt.Sprintf("values=%d", values), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "open.db")
			fillBench(b, path, values)
			b.ResetTimer()
			for range b.N {
				s, err := Open(path, Options{Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// Scrub in chunks of 1024 values over a store of 100k values (page cache
// warm): the CPU a server's background scrub costs, per chunk, and the
// rate it could reach at most (values/s, MB/s of values as stored).
func BenchmarkScrub(b *testing.B) {
	const values, chunk = 100_000, 1024
	path := filepath.Join(b.TempDir(), "scrub.db")
	fillBench(b, path, values)
	s, err := Open(path, Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	b.ResetTimer()
	var p ScrubProgress
	for range b.N {
		if p, err = s.Scrub(chunk); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	checked := p.Passes*(values+3) + p.Checked // store.wal holds 3 values
	b.ReportMetric(float64(checked)/b.Elapsed().Seconds(), "values/s")
	b.ReportMetric(float64(p.Bytes)/1e6/b.Elapsed().Seconds(), "MB/s")
}
