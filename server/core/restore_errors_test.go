package core

import (
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// errRot stands for what a store returns when a value does not match its
// tag (store.ErrCorrupt, docs/protocol.md change 69).
var errRot = errors.New("rot: the value does not match its tag")

// readerLog records the buckets Restore reads, in order.
type readerLog struct {
	inner   Reader
	buckets []string
}

func (r *readerLog) ForEach(bucket string, fn func(k, v []byte) error) error {
	if !slices.Contains(r.buckets, bucket) {
		r.buckets = append(r.buckets, bucket)
	}
	return r.inner.ForEach(bucket, fn)
}

// rottenReader fails its reads of one bucket: at once, or after the
// bucket's first value was handed over.
type rottenReader struct {
	inner      Reader
	bucket     string
	afterFirst bool
}

func (r rottenReader) ForEach(bucket string, fn func(k, v []byte) error) error {
	if bucket != r.bucket {
		return r.inner.ForEach(bucket, fn)
	}
	if !r.afterFirst {
		return errRot
	}
	first := true
	err := r.inner.ForEach(bucket, func(k, v []byte) error {
		if !first {
			return errRot
		}
		first = false
		return fn(k, v)
	})
	if err == nil {
		err = errRot // fewer than two values: the damage is past the first
	}
	return err
}

// A store reports damage as an error of its reads (docs/protocol.md change
// 69, rule 5): Restore stops on an error of any bucket it reads, at once or
// part way through, and passes it on. A core that went on without the
// bucket's values would serve having forgotten votes, high-water marks or
// acknowledged statements: the amnesia no one counts among the f.
func TestRestoreStopsOnAReadErrorOfEveryBucket(t *testing.T) {
	c := newCluster(t, 4, 1)
	cl := c.newClient()
	c.doorway(cl, "L", 1, 1)
	c.tick(c.cores[0].cfg.DefaultTTL) // votes and TTLs on disk too
	c.flush()

	log := &readerLog{inner: mapReader(c.disks[0])}
	require.NoError(t, c.newCoreOf(0, c.configs[0]).Restore(log))
	require.GreaterOrEqual(t, len(log.buckets), 12, "the buckets Restore reads: %q", log.buckets)
	for _, b := range log.buckets {
		for _, afterFirst := range []bool{false, true} {
			err := c.newCoreOf(0, c.configs[0]).Restore(rottenReader{inner: mapReader(c.disks[0]), bucket: b, afterFirst: afterFirst})
			require.ErrorIs(t, err, errRot, "bucket %s (after its first value: %v): Restore went on without it", b, afterFirst)
		}
	}
	t.Logf("Restore stops on a read error of each of %d buckets: %q", len(log.buckets), log.buckets)
}
