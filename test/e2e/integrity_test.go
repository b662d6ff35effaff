package e2e

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// A disk that rots (issue 57, docs/protocol.md change 69), on real
// processes: a server stopped cleanly after exclusive, shared and permit
// locks has its bq.db changed the way a disk changes it — one bit flipped
// inside one value of each bucket, and two values of a bucket swapped (a
// misdirected write) — one trial per bucket and kind, and one with a bit
// flipped inside a record of its WAL. Every trial must end
// with the server refusing to start with exit 9, naming the bucket, and
// writing its CORRUPT mark, which 'server list' shows; the other three
// serve locks all along. Then the runbook's repair: the member is replaced
// and its replacement serves.
func TestACorruptStoreStopsTheServerAndAReplaceRepairsIt(t *testing.T) {
	dir := initCluster(t, 4)
	servers := runServers(t, dir, 4)
	c := bqc{t: t, cluster: filepath.Join(dir, "cluster.yaml"), work: t.TempDir()}
	for _, args := range [][]string{
		{"lock", "rot/x", "--", "true"},
		{"lock", "rot/shared", "--shared", "--", "true"},
		{"lock", "rot/pool", "--permits", "2", "--", "true"},
	} {
		r := c.run("a.key", args...)
		require.Equal(t, 0, r.code, "%v: %s%s", args, r.out, r.err)
	}
	// A holder across the stop: its statement and lease are on disk too.
	holder := start(t, "holder", []string{"BQ_CLUSTER=" + c.cluster, "BQ_IDENTITY=" + filepath.Join(c.work, "h.key")},
		bin("bqclient"), "lock", "rot/held", "--", "sh", "-c", "echo holding; exec sleep 300")
	holder.waitFor(30*time.Second, 1, "holding")
	code, _ := servers[3].stop(syscall.SIGTERM, 10*time.Second)
	require.Equal(t, 0, code)

	db := filepath.Join(dir, "server-3", "bq.db")
	clean, err := os.ReadFile(db)
	require.NoError(t, err)
	trials := rotTrials(t, db)
	names := make([]string, len(trials))
	for i, tr := range trials {
		names[i] = tr.name
	}
	t.Logf("%d trials: %s", len(trials), strings.Join(names, ", "))
	for _, want := range []string{"flip in cert", "flip in hw", "swap in hw", "flip in hwj", "flip in meta", "flip in spoke", "flip in stmt", "flip in store.wal", "flip in ttl"} {
		require.Contains(t, names, want, "the buckets and kinds to try")
	}
	mark := filepath.Join(dir, "server-3", "CORRUPT")
	wal := db + ".wal"
	cleanWAL, err := os.ReadFile(wal)
	require.NoError(t, err)
	trials = append(trials, rotTrial{name: "flip in the WAL", file: wal, apply: func(file []byte) int {
		// The chain from offset 0: the pass's marker, then its records
		// (length u32, CRC u32, pass u64, seq u64, payload). A bit of the
		// first record after the marker: the chain ends early while valid
		// records of its pass follow.
		first := 24 + int(binary.LittleEndian.Uint32(file))
		n := int(binary.LittleEndian.Uint32(file[first:]))
		require.Positive(t, n, "no record after the marker in the WAL")
		file[first+24+n/2] ^= 0x01
		return 1
	}})
	for _, tr := range trials {
		require.NoError(t, os.WriteFile(db, clean, 0o600))
		require.NoError(t, os.WriteFile(wal, cleanWAL, 0o600))
		require.NoError(t, os.RemoveAll(mark))
		target, original := db, clean
		if tr.file != "" {
			target, original = tr.file, cleanWAL
		}
		changed := bytes.Clone(original)
		require.Positive(t, tr.apply(changed), "%s: nothing changed", tr.name)
		require.NoError(t, os.WriteFile(target, changed, 0o600))

		p := start(t, "s3 "+tr.name, nil, bin("bqserver"), "run", "--dir", dir, "--id", "3")
		require.Equal(t, 9, p.waitExit(30*time.Second), "%s: the server did not stop with exit 9:\n%s", tr.name, p.output())
		if tr.file != "" {
			require.Contains(t, p.output(), tr.file+" is corrupt", tr.name)
		} else {
			require.Contains(t, p.output(), fmt.Sprintf("bucket %q", tr.bucket), tr.name)
		}
		b, err := os.ReadFile(mark)
		require.NoError(t, err, "%s: no CORRUPT mark", tr.name)
		require.Contains(t, string(b), "server replace")
		t.Logf("%s: exit 9, %s", tr.name, strings.SplitN(string(b), "\n", 2)[0])
	}

	// The mark alone keeps it down, and the dashboard says why.
	again := start(t, "s3 again", nil, bin("bqserver"), "run", "--dir", dir, "--id", "3")
	require.Equal(t, 9, again.waitExit(30*time.Second), again.output())
	require.Contains(t, again.output(), "refusing to start")
	out, code := runCLI(t, "bqserver", "server", "list", "--dir", dir, "--timeout", "5s")
	require.Equal(t, 0, code, out)
	require.Regexp(t, `(?m)^3 +member +\S+ +corrupt `, out)
	require.Contains(t, out, "replace it, 'bqserver server replace 3 --dir DIR'")
	r := c.run("a.key", "lock", "rot/x", "--timeout", "30s", "--", "true")
	require.Equal(t, 0, r.code, "three of four serve: %s%s", r.out, r.err)

	// The repair: a new identity copies the state from the others.
	out, code = runCLI(t, "bqserver", "server", "replace", "3", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "server 4 is new")
	s4 := start(t, "s4", nil, bin("bqserver"), "run", "--dir", dir, "--id", "4")
	s4.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
	r = c.run("a.key", "lock", "rot/x", "--timeout", "30s", "--", "true")
	require.Equal(t, 0, r.code, r.out+r.err)
	out, code = runCLI(t, "bqserver", "server", "list", "--dir", dir, "--timeout", "5s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "4 of 4 servers reachable", out)
}

// rotTrial is one way a disk changes bq.db.
type rotTrial struct {
	name, bucket string
	file         string                // the WAL, for a trial on it; empty: bq.db
	apply        func(file []byte) int // changes file, returns the bytes changed
}

// rotTrials reads the bbolt file at path (its server stopped) and makes,
// for each bucket, a trial that flips one bit in the middle of one of its
// values (every copy the file holds of it, live or in a freed page), and,
// for each bucket with two values of one length, one that swaps them
// (every copy of each).
func rotTrials(t *testing.T, path string) []rotTrial {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	require.NoError(t, err)
	defer db.Close()
	var trials []rotTrial
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			bucket := string(name)
			var longest []byte
			byLen := map[int][]byte{}
			var pair [2][]byte
			_ = b.ForEach(func(k, v []byte) error {
				if v == nil {
					return nil
				}
				if len(v) > len(longest) {
					longest = bytes.Clone(v)
				}
				if other, ok := byLen[len(v)]; ok && pair[0] == nil && !bytes.Equal(other, v) {
					pair = [2][]byte{other, bytes.Clone(v)}
				}
				byLen[len(v)] = bytes.Clone(v)
				return nil
			})
			if len(longest) >= 20 { // long enough to be found alone
				v := longest
				trials = append(trials, rotTrial{name: "flip in " + bucket, bucket: bucket, apply: func(file []byte) int {
					n := 0
					for _, at := range indexAll(file, v) {
						file[at+len(v)/2] ^= 0x04
						n++
					}
					return n
				}})
			}
			if pair[0] != nil && len(pair[0]) >= 20 {
				a, b := pair[0], pair[1]
				trials = append(trials, rotTrial{name: "swap in " + bucket, bucket: bucket, apply: func(file []byte) int {
					ia, ib := indexAll(file, a), indexAll(file, b)
					for _, at := range ia {
						copy(file[at:], b)
					}
					for _, at := range ib {
						copy(file[at:], a)
					}
					return len(ia) + len(ib)
				}})
			}
			return nil
		})
	}))
	return trials
}

// indexAll is where needle starts in file, every time.
func indexAll(file, needle []byte) []int {
	var at []int
	for off := 0; ; {
		i := bytes.Index(file[off:], needle)
		if i < 0 {
			return at
		}
		at = append(at, off+i)
		off += i + len(needle)
	}
}

// A bit that flips in bq.db under a running server (real processes) is
// found by its background scrub, not by a client: the server exits 9 by
// itself, naming bucket and key, writes its CORRUPT mark, and the other
// three serve on.
func TestTheScrubStopsARunningServer(t *testing.T) {
	dir := initCluster(t, 4)
	cfg := filepath.Join(t.TempDir(), "server.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("scrub_interval: 50ms\n"), 0o600))
	var servers []*proc
	for i := range 4 {
		servers = append(servers, start(t, fmt.Sprintf("s%d", i), nil, bin("bqserver"), "run", "--dir", dir, "--id", fmt.Sprint(i), "--config", cfg))
	}
	for _, p := range servers {
		p.waitFor(20*time.Second, 3, "accepted server connection")
	}
	c := bqc{t: t, cluster: filepath.Join(dir, "cluster.yaml"), work: t.TempDir()}
	kg := c.run("a.key", "keygen")
	require.Equal(t, 0, kg.code, kg.out+kg.err)
	m := regexp.MustCompile(`client id ([0-9a-f]{64})`).FindStringSubmatch(kg.out + kg.err)
	require.NotNil(t, m, kg.out+kg.err)
	r := c.run("a.key", "lock", "rot/live", "--", "true")
	require.Equal(t, 0, r.code, r.out+r.err)

	// The client's id is in the keys and values the servers keep for it;
	// wait until a checkpoint has put them in server 3's bq.db (the WAL
	// holds them until then), then flip a bit in every copy.
	db := filepath.Join(dir, "server-3", "bq.db")
	needle, err := hex.DecodeString(m[1])
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(db)
		require.NoError(t, err)
		if len(indexAll(b, needle)) > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the client's id never reached server 3's bq.db")
		time.Sleep(20 * time.Millisecond)
	}
	f, err := os.OpenFile(db, os.O_RDWR, 0)
	require.NoError(t, err)
	b, err := os.ReadFile(db)
	require.NoError(t, err)
	for _, at := range indexAll(b, needle) {
		_, err := f.WriteAt([]byte{b[at+len(needle)/2] ^ 0x08}, int64(at+len(needle)/2))
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())

	require.Equal(t, 9, servers[3].waitExit(time.Minute), servers[3].output())
	require.Contains(t, servers[3].output(), "is corrupt: bucket")
	_, err = os.Stat(filepath.Join(dir, "server-3", "CORRUPT"))
	require.NoError(t, err, "no CORRUPT mark")
	r = c.run("a.key", "lock", "rot/live", "--timeout", "30s", "--", "true")
	require.Equal(t, 0, r.code, "three of four serve: %s%s", r.out, r.err)
}
