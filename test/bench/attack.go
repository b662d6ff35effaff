package main

// The attack benchmark (--attack): one legitimate client measures its Lock
// latency while other clients of the same machine attack the cluster, and the
// servers' memory and data are read before, during and after. See
// docs/performance.md, "Under attack".

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/certs"
	bolt "go.etcd.io/bbolt"
)

// attackOptions are the sizes of the attack benchmark.
type attackOptions struct {
	identities  int           // identities per wave
	concurrency int           // wave identities (and unenrolled attempts) at a time
	baseline    time.Duration // legitimate client alone
	idle        time.Duration // wait after a wave before measuring again
	flood       time.Duration // each flood's length
	unenrolled  int           // connection attempts with unenrolled keys
	legitEvery  time.Duration // the legitimate client starts a cycle at most this often
	refuseWait  time.Duration // an unenrolled attempt waits this long for its refusals
}

func addAttackFlags(fs *flag.FlagSet, a *attackOptions) {
	fs.IntVar(&a.identities, "identities", 10000, "--attack: short-lived identities per wave (--quick: 1000)")
	fs.IntVar(&a.concurrency, "attackers", 64, "--attack: wave identities and unenrolled connection attempts at a time")
	fs.DurationVar(&a.baseline, "baseline", 10*time.Second, "--attack: length of each legitimate-client baseline (--quick: 5s)")
	fs.DurationVar(&a.idle, "idle", 60*time.Second, "--attack: idle time after each wave before measuring the servers again (--quick: 20s)")
	fs.DurationVar(&a.flood, "flood", 20*time.Second, "--attack: length of the lock-name flood and of the message flood (--quick: 10s)")
	fs.IntVar(&a.unenrolled, "unenrolled", 10000, "--attack: connection attempts with unenrolled keys to the closed cluster (--quick: 1000)")
	fs.DurationVar(&a.legitEvery, "legit-every", 25*time.Millisecond, "--attack: the legitimate client starts a Lock+Unlock cycle at most this often (it must stay under client_rate)")
}

// attackDefaults applies --quick to the sizes not given on the command line.
func (a *attackOptions) attackDefaults(quick bool, set func(string) bool) {
	a.refuseWait = 5 * time.Second
	if !quick {
		return
	}
	for _, d := range []struct {
		name string
		f    func()
	}{
		{"identities", func() { a.identities = 1000 }},
		{"baseline", func() { a.baseline = 5 * time.Second }},
		{"idle", func() { a.idle = 20 * time.Second }},
		{"flood", func() { a.flood = 10 * time.Second }},
		{"unenrolled", func() { a.unenrolled = 1000 }},
	} {
		if !set(d.name) {
			d.f()
		}
	}
}

// Phase kinds: an attack phase is compared with its baseline (target a).
const (
	kindBaseline = "baseline"
	kindAttack   = "attack"
	kindAfter    = "after"
)

// attackPhase is one row of the report.
type attackPhase struct {
	Name string
	Kind string
	// Legit is the legitimate client's Lock latencies; Cycles and Errors its
	// completed cycles and failed ones.
	Legit          durations
	Cycles, Errors int
	base           *attackPhase // the baseline an attack phase compares with
	// Done, Refused and Other count the attack's operations (Unit says what).
	Done, Refused, Other int
	Unit                 string
	// memReading is per server, in bytes: live (the minimum of a few
	// scrapes a second apart) for baselines and after a wave, the peak
	// sampled during an attack.
	memReading
	Mem string // "live" or "peak"
	// Refusals is bq_limit_refusals_total per limit, summed over the
	// servers, at the end of the phase (cumulative for the cluster).
	Refusals map[string]float64
	// Seconds is the phase's wall time; SrvCPU and CliCPU the CPU seconds of
	// the servers and of this process in it.
	Seconds, SrvCPU, CliCPU float64
	// Details are the attack's counts by kind (replies, errors, events).
	Details map[string]int
	// Gauges are bq_locks_in_use, bq_active_set_members and
	// bq_verify_cache_misses_total (statements verified), summed over the
	// servers, at the end.
	Gauges map[string]float64
}

func (p *attackPhase) p50() float64 { return p.Legit.ms(.5) }

// ratio is the legitimate Lock p50 over its baseline's.
func (p *attackPhase) ratio() float64 {
	if p.base == nil || len(p.Legit) == 0 {
		return math.NaN()
	}
	return p.p50() / p.base.p50()
}

type attackReport struct {
	env    env
	opts   *options
	phases []*attackPhase
	// stores is what the open cluster's stores hold once it stopped, per
	// server.
	stores []map[string]bucketStat
}

func (r *attackReport) find(name string) *attackPhase {
	for _, p := range r.phases {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Phase names used by the targets.
const (
	phBaseline   = "baseline (open)"
	phWave1      = "wave 1"
	phAfter1     = "after wave 1"
	phWave2      = "wave 2"
	phAfter2     = "after wave 2"
	phNames      = "lock-name flood"
	phMessages   = "message flood"
	phClosedBase = "baseline (closed)"
	phUnenrolled = "unenrolled keys"
)

// runAttack runs the attack benchmark and prints its report; on a failure it
// prints what it measured so far.
func runAttack(ctx context.Context, o *options, work string, e env) error {
	if _, err := os.Stat(o.bqserver); err != nil {
		return fmt.Errorf("no bqserver binary (build it: go build -o DIR ./cmd/bqserver, pass --bqserver): %w", err)
	}
	r := &attackReport{env: e, opts: o}
	err := r.run(ctx, work)
	r.env.loadAfter = loadavg()
	if len(r.phases) > 0 {
		r.print(os.Stdout)
	}
	if err != nil {
		return err
	}
	if o.json {
		b, err := json.Marshal(r.json())
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	}
	return nil
}

func (r *attackReport) run(ctx context.Context, work string) error {
	a := r.opts.atk
	logf("attack: starting an open cluster of %d bqserver processes", bqServers)
	b, err := startBQ(r.opts.bqserver, work, "")
	if err != nil {
		return err
	}
	defer b.stop()
	ls, err := b.dial(ctx, 1, "legit", nil)
	if err != nil {
		return fmt.Errorf("legitimate client: %w", err)
	}
	legit := ls[0].(*bqLocker)
	defer legit.Close()

	base, err := r.baseline(ctx, b, legit, phBaseline)
	if err != nil {
		return err
	}
	for w, names := range [][2]string{{phWave1, phAfter1}, {phWave2, phAfter2}} {
		logf("attack: wave %d, %d identities, %d at a time", w+1, a.identities, a.concurrency)
		if _, err := r.attack(ctx, b, legit, base, names[0], "identities", func(ctx context.Context, p *attackPhase) error {
			return wave(ctx, b.cluster, a.identities, a.concurrency, p)
		}); err != nil {
			return err
		}
		logf("attack: idle for %v", a.idle)
		if err := sleep(ctx, a.idle); err != nil {
			return err
		}
		p := &attackPhase{Name: names[1], Kind: kindAfter, Mem: "live"}
		if err := r.finish(ctx, b, p, true); err != nil {
			return err
		}
	}
	logf("attack: lock-name flood by one identity for %v", a.flood)
	if _, err := r.attack(ctx, b, legit, base, phNames, "TryLocks", func(ctx context.Context, p *attackPhase) error {
		return nameFlood(ctx, b.cluster, a.flood, p)
	}); err != nil {
		return err
	}
	logf("attack: message flood (Listen of 4,096 and 100,000 members, GetSet) for %v", a.flood)
	if _, err := r.attack(ctx, b, legit, base, phMessages, "messages", func(ctx context.Context, p *attackPhase) error {
		return messageFlood(ctx, b.cluster, a.flood, p)
	}); err != nil {
		return err
	}
	_ = legit.Close()
	b.stop()
	r.stores, err = storeRecords(b)
	if err != nil {
		return err
	}

	logf("attack: starting a closed cluster")
	cb, err := startCluster(r.opts.bqserver, work, "", clusterOptions{name: "bq-closed", closed: true})
	if err != nil {
		return err
	}
	defer cb.stop()
	closedLegit, err := cb.enroll(ctx, work, "legit")
	if err != nil {
		return err
	}
	defer closedLegit.Close()
	cbase, err := r.baseline(ctx, cb, closedLegit, phClosedBase)
	if err != nil {
		return err
	}
	logf("attack: %d connection attempts with unenrolled keys, %d at a time", a.unenrolled, a.concurrency)
	_, err = r.attack(ctx, cb, closedLegit, cbase, phUnenrolled, "attempts", func(ctx context.Context, p *attackPhase) error {
		return unenrolled(ctx, cb.cluster, a.unenrolled, a.concurrency, a.refuseWait, p)
	})
	return err
}

// baseline measures the legitimate client alone, then the servers' live memory.
func (r *attackReport) baseline(ctx context.Context, b *bqCluster, l *bqLocker, name string) (*attackPhase, error) {
	a := r.opts.atk
	logf("attack: %s, the legitimate client alone for %v", name, a.baseline)
	// Warm up: the first cycles set up the lock at every server.
	for range 20 {
		if err := legitCycle(ctx, l, nil); err != nil {
			return nil, fmt.Errorf("%s: warm-up: %w", name, err)
		}
	}
	p := &attackPhase{Name: name, Kind: kindBaseline, Mem: "live"}
	cpu0, err := cpuNow(b)
	if err != nil {
		return nil, err
	}
	run := startLegit(ctx, l, a.legitEvery)
	err = sleep(ctx, a.baseline)
	run.finish(p)
	if err != nil {
		return nil, err
	}
	p.cpuSince(b, cpu0)
	if p.Errors > 0 {
		return nil, fmt.Errorf("%s: the legitimate client failed %d times alone (last: %v)", name, p.Errors, run.lastErr)
	}
	if err := r.finish(ctx, b, p, true); err != nil {
		return nil, err
	}
	return p, nil
}

// attack runs f while the legitimate client measures and the servers'
// memory is sampled every second.
func (r *attackReport) attack(ctx context.Context, b *bqCluster, l *bqLocker, base *attackPhase, name, unit string,
	f func(context.Context, *attackPhase) error) (*attackPhase, error) {
	p := &attackPhase{Name: name, Kind: kindAttack, base: base, Unit: unit, Mem: "peak", Details: map[string]int{}}
	cpu0, err := cpuNow(b)
	if err != nil {
		return nil, err
	}
	s := startSampler(b)
	run := startLegit(ctx, l, r.opts.atk.legitEvery)
	err = f(ctx, p)
	run.finish(p)
	p.memReading = s.finish()
	p.cpuSince(b, cpu0)
	if err != nil {
		r.phases = append(r.phases, p)
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	logf("attack: %s: %d %s, %d refused, %d other; legitimate Lock p50 %s ms (×%s), %d errors",
		name, p.Done, unit, p.Refused, p.Other, f3(p.p50()), f3(p.ratio()), p.Errors)
	if err := r.finish(ctx, b, p, false); err != nil {
		return nil, err
	}
	return p, nil
}

// finish reads the phase's end state (after the once-a-second metrics
// snapshot): refusals, gauges, and with live the servers' live memory.
func (r *attackReport) finish(ctx context.Context, b *bqCluster, p *attackPhase, live bool) error {
	r.phases = append(r.phases, p)
	if err := sleep(ctx, publishWait); err != nil {
		return err
	}
	if live {
		var err error
		if p.memReading, err = liveMemory(ctx, b, 3); err != nil {
			return err
		}
	}
	m, err := scrape(b.metrics)
	if err != nil {
		return err
	}
	p.Refusals = map[string]float64{}
	for k, v := range m {
		if l, ok := strings.CutPrefix(k, "bq_limit_refusals_total{"); ok {
			p.Refusals[labelValue(l, "limit")] += v
		}
	}
	p.Gauges = map[string]float64{"locks_in_use": m["bq_locks_in_use"], "active_set_members": m["bq_active_set_members"],
		"statements_verified": m["bq_verify_cache_misses_total"]}
	return nil
}

// labelValue is the value of label in `a="x",b="y"}`.
func labelValue(labels, label string) string {
	for _, l := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
		if v, ok := strings.CutPrefix(l, label+`="`); ok {
			return strings.TrimSuffix(v, `"`)
		}
	}
	return "?"
}

type cpuReading struct {
	at       time.Time
	srv, cli float64
}

func cpuNow(b *bqCluster) (cpuReading, error) {
	srv, err1 := cpuSum(b.pids())
	cli, err2 := cpuSeconds(0)
	return cpuReading{time.Now(), srv, cli}, errors.Join(err1, err2)
}

func (p *attackPhase) cpuSince(b *bqCluster, r0 cpuReading) {
	r1, err := cpuNow(b)
	if err != nil {
		return
	}
	p.Seconds, p.SrvCPU, p.CliCPU = r1.at.Sub(r0.at).Seconds(), r1.srv-r0.srv, r1.cli-r0.cli
}

// ---------------------------------------------------------------------------
// The legitimate client.

// legitCycle is one Lock+Unlock; lock gets the Lock's latency.
func legitCycle(ctx context.Context, l *bqLocker, lock *time.Duration) error {
	opCtx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	t0 := time.Now()
	if err := l.Lock(opCtx); err != nil {
		return err
	}
	if lock != nil {
		*lock = time.Since(t0)
	}
	return l.Unlock(opCtx)
}

// legitRun is the legitimate client looping Lock+Unlock in the background,
// one cycle started at most every `every`.
type legitRun struct {
	stop    chan struct{}
	done    chan struct{}
	lock    durations
	cycles  int
	errs    int
	lastErr error
}

func startLegit(ctx context.Context, l *bqLocker, every time.Duration) *legitRun {
	r := &legitRun{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		next := time.Now()
		for {
			select {
			case <-r.stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(time.Until(next)):
			}
			next = time.Now().Add(every)
			var d time.Duration
			if err := legitCycle(ctx, l, &d); err != nil {
				if ctx.Err() != nil {
					return
				}
				r.errs++
				r.lastErr = err
				next = time.Now().Add(100 * time.Millisecond)
				continue
			}
			r.lock = append(r.lock, d)
			r.cycles++
		}
	}()
	return r
}

// finish stops the run after its current cycle and records it in p.
func (r *legitRun) finish(p *attackPhase) {
	close(r.stop)
	<-r.done
	p.Legit, p.Cycles, p.Errors = r.lock, r.cycles, r.errs
	if r.errs > 0 {
		logf("attack: %s: the legitimate client failed %d times; last: %v", p.Name, r.errs, r.lastErr)
	}
}

// ---------------------------------------------------------------------------
// The servers' memory and data.

// memReading is one value per server of each: heap in use
// (go_memstats_heap_alloc_bytes), RSS, the data directory's size, and the
// heap goal of the next collection (go_memstats_next_gc_bytes: twice the
// heap marked live by the last one, with the default GOGC=100).
type memReading struct {
	Heap, RSS, Data, Goal []float64
}

// memory reads every server's memory from its metrics, and the size of its
// data directory.
func memory(b *bqCluster) (memReading, error) {
	var r memReading
	client := &http.Client{Timeout: 5 * time.Second}
	for i, u := range b.metrics {
		m := make(map[string]float64)
		resp, err := client.Get(u)
		if err != nil {
			return r, err
		}
		err = parseMetrics(resp.Body, m)
		resp.Body.Close()
		if err != nil {
			return r, fmt.Errorf("%s: %w", u, err)
		}
		var v [3]float64
		for j, name := range []string{"go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "go_memstats_next_gc_bytes"} {
			var ok bool
			if v[j], ok = m[name]; !ok {
				return r, fmt.Errorf("%s: no %s", u, name)
			}
		}
		d, err := dirSize(filepath.Join(b.dir, fmt.Sprintf("server-%d", i)))
		if err != nil {
			return r, err
		}
		r.Heap, r.RSS, r.Goal, r.Data = append(r.Heap, v[0]), append(r.RSS, v[1]), append(r.Goal, v[2]), append(r.Data, d)
	}
	return r, nil
}

// merge keeps, per server, the smaller (or with larger, the larger) of each
// value; data sizes are always the latest with smaller.
func (r *memReading) merge(x memReading, larger bool) {
	if r.Heap == nil {
		*r = x
		return
	}
	pick := func(a, b float64) float64 {
		if larger {
			return max(a, b)
		}
		return min(a, b)
	}
	for j := range x.Heap {
		r.Heap[j], r.RSS[j], r.Goal[j] = pick(r.Heap[j], x.Heap[j]), pick(r.RSS[j], x.RSS[j]), pick(r.Goal[j], x.Goal[j])
		if larger {
			r.Data[j] = max(r.Data[j], x.Data[j])
		} else {
			r.Data[j] = x.Data[j]
		}
	}
}

// liveMemory is the minimum of k readings a second apart (the heap between
// collections comes closest to what is live), with the last data sizes.
func liveMemory(ctx context.Context, b *bqCluster, k int) (memReading, error) {
	var r memReading
	for i := range k {
		if i > 0 {
			if err := sleep(ctx, time.Second); err != nil {
				return r, err
			}
		}
		x, err := memory(b)
		if err != nil {
			return r, err
		}
		r.merge(x, false)
	}
	return r, nil
}

// sampler keeps the per-server maximum of memory readings taken every second.
type sampler struct {
	stop chan struct{}
	done chan struct{}
	peak memReading
}

func startSampler(b *bqCluster) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	take := func() {
		if x, err := memory(b); err == nil { // a reading missed under load: the next one counts
			s.peak.merge(x, true)
		}
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			take()
			select {
			case <-s.stop:
				take()
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) finish() memReading {
	close(s.stop)
	<-s.done
	return s.peak
}

// dirSize is the total size of the regular files under dir.
func dirSize(dir string) (float64, error) {
	var sum int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a file renamed or removed meanwhile
			}
			return err
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				sum += info.Size()
			}
		}
		return nil
	})
	return float64(sum), err
}

// ---------------------------------------------------------------------------
// The attacks.

// errorKinds counts error messages with their ids and numbers blanked, so
// that equal causes count together.
type errorKinds struct {
	mu sync.Mutex
	m  map[string]int
}

var idLike = regexp.MustCompile(`[0-9a-f]{8,}|[0-9]+(\.[0-9]+)?(ms|s|µs)?`)

func (e *errorKinds) add(p *attackPhase, prefix string, err error) {
	msg := errorKind(err)
	e.mu.Lock()
	p.Details[prefix+msg]++
	e.mu.Unlock()
}

// errorKind is err's message with ids and numbers blanked, cut to 160 bytes.
func errorKind(err error) string {
	msg := idLike.ReplaceAllString(err.Error(), "#")
	if len(msg) > 160 {
		msg = msg[:160] + "…"
	}
	return msg
}

// floodOpTimeout bounds one TryLock+Unlock of the lock-name flood: an
// uncontended one takes about 5 ms, and an attempt the servers refuse for
// new_locks_per_minute waits for its Exit until this ends (the servers
// refuse that Exit too: see docs/performance.md, "Under attack").
const floodOpTimeout = 250 * time.Millisecond

// bigListen is the members of the message flood's largest Listens: 3.4 MB
// encoded, under the 4 MiB frame limit but over the decoder's 16,384
// elements an array.
const bigListen = 100_000

// bucketStat is what one bucket of a server's bbolt file holds.
type bucketStat struct {
	Records, Bytes int // keys, and key plus value bytes
}

// storeRecords counts the records of every bucket of each server's bq.db;
// the servers must be stopped (bbolt locks the file).
func storeRecords(b *bqCluster) ([]map[string]bucketStat, error) {
	var out []map[string]bucketStat
	for i := range b.servers {
		path := filepath.Join(b.dir, fmt.Sprintf("server-%d", i), "bq.db")
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		m := make(map[string]bucketStat)
		err = db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
				var st bucketStat
				err := bk.ForEach(func(k, v []byte) error {
					st.Records++
					st.Bytes += len(k) + len(v)
					return nil
				})
				m[string(name)] = st
				return err
			})
		})
		_ = db.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// The closed cluster's legitimate client.

// enroll makes an identity for name with "bqserver client add" and dials
// with it, on the lock "legit".
func (b *bqCluster) enroll(ctx context.Context, work, name string) (*bqLocker, error) {
	file := filepath.Join(work, name+".identity")
	out, err := exec.Command(b.bin, "client", "add", name, "--dir", b.dir, "--out", file).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("bqserver client add: %v\n%s", err, out)
	}
	id, err := certs.LoadIdentity(file)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := bq.Dial(dctx, bq.Config{Cluster: b.cluster, Identity: id.Key, Admission: id.Admission})
	if err != nil {
		return nil, fmt.Errorf("enrolled client: %w", err)
	}
	return &bqLocker{c: c, m: c.Mutex("legit")}, nil
}

// ---------------------------------------------------------------------------
// The report.

const mb = 1 << 20

// targets are the three targets' values: the worst ratio of each.
type attackTargets struct {
	LockRatio, LockRatioPhase string
	lockRatio                 float64
	heapGrowth                float64 // worst (after / baseline − 1) over servers and waves
	heapWhere                 string
	heap2, data2              float64 // worst (after wave 2 / after wave 1 − 1) over servers
	heap2Where, data2Where    string
	complete                  bool
}
