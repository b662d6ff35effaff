package sim

import (
	"sort"

	"github.com/bq-lock/bq/server/core"
)

// disk is a server's simulated bbolt file: bucket → key → value. It survives
// crashes; ForEach walks keys in sorted order, as bbolt does.
type disk struct {
	buckets map[string]map[string][]byte
	writes  int
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
		if err := fn([]byte(k), append([]byte(nil), b[k]...)); err != nil {
			return err
		}
	}
	return nil
}
