package sim

import (
	"errors"
	"fmt"
	"sort"

	"github.com/bq-lock/bq/server/core"
)

// disk is a server's simulated bbolt file: bucket → key → value. It survives
// crashes; ForEach walks keys in sorted order, as bbolt does.
type disk struct {
	buckets map[string]map[string][]byte
	writes  int
	// rotten names the bucket and key of a value the disk changed
	// (FaultRotServer); empty while the disk is sound.
	rotten struct{ bucket, key string }
}

// errRotten is what the simulated store returns for a value that no longer
// matches its tag: the real store's check (server/store, docs/protocol.md
// change 69), whose tests show it finds every flipped bit, misdirected
// write and stale page; here the disk knows which value it changed.
var errRotten = errors.New("sim: a stored value does not match its tag")

// rot changes one stored value, the first of the first bucket in order
// that holds any, as a disk that rots would; it reports whether the disk
// held a value to change.
func (d *disk) rot() bool {
	names := make([]string, 0, len(d.buckets))
	for b, vals := range d.buckets {
		if len(vals) > 0 {
			names = append(names, b)
		}
	}
	if len(names) == 0 {
		return false
	}
	sort.Strings(names)
	b := d.buckets[names[0]]
	keys := make([]string, 0, len(b))
	for k := range b {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	d.rotten.bucket, d.rotten.key = names[0], keys[0]
	return true
}

func newDisk() *disk { return &disk{buckets: make(map[string]map[string][]byte)} }

// apply makes one record durable.
func (d *disk) apply(r core.Record) {
	d.writes++
	b := d.buckets[r.Bucket]
	if b == nil {
		b = make(map[string][]byte)
		d.buckets[r.Bucket] = b
	}
	if r.Delete {
		delete(b, string(r.Key))
		return
	}
	b[string(r.Key)] = append([]byte(nil), r.Value...)
}

// ForEach implements core.Reader.
func (d *disk) ForEach(bucket string, fn func(k, v []byte) error) error {
	b := d.buckets[bucket]
	keys := make([]string, 0, len(b))
	for k := range b {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if bucket == d.rotten.bucket && k == d.rotten.key {
			return fmt.Errorf("%w: bucket %q key %x", errRotten, bucket, k)
		}
		if err := fn([]byte(k), append([]byte(nil), b[k]...)); err != nil {
			return err
		}
	}
	return nil
}
