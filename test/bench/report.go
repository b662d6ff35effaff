package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

type results struct {
	env     env
	opts    *options
	systems []*sysResult // bq (each scheme), then etcd, then bq/n=N and etcd/n=N (--larger); in the order measured
}

// largerName is the name of system base ("bq", "etcd") in the --larger run.
func (r *results) largerName(base string) string {
	return fmt.Sprintf("%s/n=%d", base, r.opts.larger)
}

// get returns the system called name, or nil.
func (r *results) get(name string) *sysResult {
	for _, s := range r.systems {
		if s.name == name {
			return s
		}
	}
	return nil
}

// perAcq is a total divided by acquisitions (NaN without any).
func perAcq(total float64, acq int) float64 {
	if acq == 0 {
		return math.NaN()
	}
	return total / float64(acq)
}

// sumSeries sums every series of the metric name, whatever its labels (NaN
// when there is none).
func sumSeries(m map[string]float64, name string) float64 {
	sum, found := 0.0, false
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			sum, found = sum+v, true
		}
	}
	if !found {
		return math.NaN()
	}
	return sum
}

// acqStats is a window's counters per acquisition (or per uncontended
// Lock+Unlock cycle), summed over all servers.
type acqStats struct {
	ServerCPUms, ClientCPUms float64
	// Fsyncs are durable commits on the latency path (bq: WAL group commits;
	// etcd: WAL fsyncs); FsyncMs is their mean latency.
	Fsyncs, FsyncMs float64
	// bq: messages received from clients, received from servers, and queued
	// to clients.
	C2S, S2S, S2C float64
	// Bytes received by servers (bq: from clients and servers, encoded
	// frames; etcd: client gRPC and peer raft traffic); BytesS2S is the
	// part servers received from servers.
	Bytes, BytesS2S float64
	// etcd: client gRPC calls started.
	RPCs float64
	// bq: listener pushes (the part of S2C that is not a reply).
	Pushes float64
}

// CPUms is the CPU of servers and clients together.
func (st acqStats) CPUms() float64 { return st.ServerCPUms + st.ClientCPUms }

func (s *sysResult) stats(w window, acq int) acqStats {
	m := w.Metrics
	st := acqStats{ServerCPUms: 1000 * perAcq(w.ServerCPU, acq), ClientCPUms: 1000 * perAcq(w.ClientCPU, acq)}
	st.C2S, st.S2S, st.S2C, st.RPCs, st.Pushes = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
	var fsyncs, fsyncSum float64
	switch {
	case s.bq:
		fsyncs, fsyncSum = sumSeries(m, "bq_fsync_seconds_count"), sumSeries(m, "bq_fsync_seconds_sum")
		st.C2S = perAcq(m[`bq_messages_in_total{from="client"}`], acq)
		st.S2S = perAcq(m[`bq_messages_in_total{from="server"}`], acq)
		st.S2C = perAcq(m[`bq_messages_out_total{to="client"}`], acq)
		st.Bytes = perAcq(sumSeries(m, "bq_bytes_in_total"), acq)
		st.BytesS2S = perAcq(m[`bq_bytes_in_total{from="server"}`], acq)
		st.Pushes = perAcq(m["bq_pushes_total"], acq)
	default: // etcd
		fsyncs, fsyncSum = sumSeries(m, "etcd_disk_wal_fsync_duration_seconds_count"), sumSeries(m, "etcd_disk_wal_fsync_duration_seconds_sum")
		st.RPCs = perAcq(sumSeries(m, "grpc_server_started_total"), acq)
		st.BytesS2S = perAcq(sumSeries(m, "etcd_network_peer_received_bytes_total"), acq)
		st.Bytes = perAcq(sumSeries(m, "etcd_network_client_grpc_received_bytes_total"), acq) + st.BytesS2S
	}
	st.Fsyncs = perAcq(fsyncs, acq)
	st.FsyncMs = math.NaN()
	if fsyncs > 0 {
		st.FsyncMs = 1000 * fsyncSum / fsyncs
	}
	return st
}

func (st acqStats) msgs() string {
	if !math.IsNaN(st.C2S) {
		return fmt.Sprintf("%.1f/%.1f/%.1f", st.C2S, st.S2S, st.S2C)
	}
	if !math.IsNaN(st.RPCs) {
		return f1(st.RPCs) + " RPCs"
	}
	return "-"
}

func (st acqStats) json(m map[string]any, prefix string) {
	m[prefix+"server_cpu_ms_per_acq"] = jnum(st.ServerCPUms)
	m[prefix+"client_cpu_ms_per_acq"] = jnum(st.ClientCPUms)
	m[prefix+"fsyncs_per_acq"] = jnum(st.Fsyncs)
	m[prefix+"fsync_mean_ms"] = jnum(st.FsyncMs)
	m[prefix+"bytes_in_per_acq"] = jnum(st.Bytes)
	m[prefix+"bytes_s2s_per_acq"] = jnum(st.BytesS2S)
	if !math.IsNaN(st.C2S) {
		m[prefix+"msgs_per_acq"] = jnum(st.C2S + st.S2S + st.S2C)
		m[prefix+"msgs_c2s_per_acq"] = jnum(st.C2S)
		m[prefix+"msgs_s2s_per_acq"] = jnum(st.S2S)
		m[prefix+"msgs_s2c_per_acq"] = jnum(st.S2C)
		m[prefix+"pushes_per_acq"] = jnum(st.Pushes)
	}
	m[prefix+"cpu_ms_per_acq"] = jnum(st.CPUms())
	if !math.IsNaN(st.RPCs) {
		m[prefix+"rpcs_per_acq"] = jnum(st.RPCs)
	}
}

// accessesPerAcq is the quorum accesses of the kinds per acquisition: each
// access goes to every server, so the servers' total is divided by n.
func (row scalingRow) accessesPerAcq(n int, kinds ...string) float64 {
	var sum float64
	for k, v := range row.Accesses {
		if slices.Contains(kinds, k) {
			sum += v
		}
	}
	return perAcq(sum/float64(n), row.R.All)
}

func (r *results) print(w io.Writer) {
	o := r.opts
	fmt.Fprintf(w, "\nbq vs etcd v3.7 on one machine: nproc=%d, kernel %s, CPU %s\n", r.env.nproc, r.env.kernel, r.env.cpu)
	fmt.Fprintf(w, "load average before %s, after %s; %s; started %s\n", r.env.loadBefore, r.env.loadAfter, r.env.goVersion, r.env.started)
	fmt.Fprintf(w, "bq: n=%d f=%d, %d bqserver processes, WAL + fdatasync (bbolt behind it), QUIC on loopback, %s (bq/SCHEME: that scheme).\n",
		o.servers, (o.servers-1)/3, o.servers, o.schemes[0])
	fmt.Fprintf(w, "etcd: %d members (embed, one process each), default fsync; concurrency.Mutex, one session per client.\n", o.etcdMembers)
	if lo := o.largerRun(); lo != nil {
		fmt.Fprintf(w, "%s, %s: the contended and spread (K = %v) workloads again with n=%d f=%d and %d etcd members.\n",
			r.largerName("bq"), r.largerName("etcd"), lo.spread, lo.servers, (lo.servers-1)/3, lo.etcdMembers)
	}
	fmt.Fprintf(w, "Per-acquisition counters are sums over all servers, in the measured window. Messages: c→s/s→s/s→c (bq),\n"+
		"client RPCs (etcd). Commits: WAL group commits, one fdatasync each (bq, applied to bbolt in the background); WAL fsyncs (etcd).\n")
	header := fmt.Sprintf("%-44s", "")
	for _, s := range r.systems {
		header += fmt.Sprintf(" %18s", s.name)
	}
	if o.workloads["uncontended"] || o.workloads["contended"] || o.workloads["failover"] {
		fmt.Fprintln(w, "\n"+header)
	}
	row := func(label string, f func(*sysResult) string) {
		line := fmt.Sprintf("%-44s", label)
		for _, s := range r.systems {
			line += fmt.Sprintf(" %18s", f(s))
		}
		fmt.Fprintln(w, line)
	}
	statRows := func(get func(*sysResult) (acqStats, bool), unit string) {
		st := func(f func(acqStats) string) func(*sysResult) string {
			return func(s *sysResult) string {
				x, ok := get(s)
				if !ok {
					return "-"
				}
				return f(x)
			}
		}
		row("  server CPU per "+unit+" (ms)", st(func(x acqStats) string { return f3(x.ServerCPUms) }))
		row("  client CPU per "+unit+" (ms)", st(func(x acqStats) string { return f3(x.ClientCPUms) }))
		row("  commits per "+unit+" / mean commit (ms)", st(func(x acqStats) string { return f1(x.Fsyncs) + " / " + f3(x.FsyncMs) }))
		row("  messages per "+unit, st(acqStats.msgs))
		row("  of which pushes to waiters (bq)", st(func(x acqStats) string { return f1(x.Pushes) }))
		row("  bytes into servers per "+unit+" (from servers)", st(func(x acqStats) string { return fmt.Sprintf("%.0f (%.0f)", x.Bytes, x.BytesS2S) }))
	}
	if o.workloads["uncontended"] {
		fmt.Fprintf(w, "uncontended, 1 client, %d Lock+Unlock cycles:\n", o.uncontendedOps)
		u := func(f func(*uncontendedResult) string) func(*sysResult) string {
			return func(s *sysResult) string {
				if s.uncontended == nil {
					return "-"
				}
				return f(s.uncontended)
			}
		}
		row("  Lock+Unlock p50 / p99 (ms)", u(func(x *uncontendedResult) string { return pair(x.Cycle.ms(.5), x.Cycle.ms(.99)) }))
		row("  Lock p50 / p99 (ms)", u(func(x *uncontendedResult) string { return pair(x.Lock.ms(.5), x.Lock.ms(.99)) }))
		row("  Unlock p50 / p99 (ms)", u(func(x *uncontendedResult) string { return pair(x.Unlock.ms(.5), x.Unlock.ms(.99)) }))
		statRows(func(s *sysResult) (acqStats, bool) {
			if s.uncontended == nil {
				return acqStats{}, false
			}
			return s.stats(s.uwindow, len(s.uncontended.Cycle)), true
		}, "cycle")
	}
	if o.workloads["contended"] {
		fmt.Fprintf(w, "contended, %d clients on one lock, %v:\n", o.contenders, o.contended)
		c := func(f func(*contendedResult) string) func(*sysResult) string {
			return func(s *sysResult) string {
				if s.contended == nil {
					return "-"
				}
				return f(s.contended)
			}
		}
		row("  acquisitions/s", c(func(x *contendedResult) string { return f1(x.opsPerSec()) }))
		row("  handoff p50 / p99 (ms)", c(func(x *contendedResult) string { return pair(x.Handoff.ms(.5), x.Handoff.ms(.99)) }))
		row("  Lock p50 / p99 (ms)", c(func(x *contendedResult) string { return pair(x.Lock.ms(.5), x.Lock.ms(.99)) }))
		row("  acquisitions per client max / min", c(func(x *contendedResult) string {
			mx, mn, _ := x.fairness()
			return fmt.Sprintf("%d / %d", mx, mn)
		}))
		row("  fairness max/min", c(func(x *contendedResult) string { _, _, f := x.fairness(); return f3(f) }))
		if bq := r.get("bq"); bq != nil && len(bq.byID) > 0 {
			fmt.Fprintf(w, "  bq acquisitions per client, in ClientID order: %v\n", bq.byID)
		}
		statRows(func(s *sysResult) (acqStats, bool) {
			if s.contended == nil {
				return acqStats{}, false
			}
			return s.stats(s.window, s.contended.Acq), true
		}, "acq")
		row("  overlapping holders (must be 0)", c(func(x *contendedResult) string { return fmt.Sprint(x.Overlaps) }))
	}
	for _, s := range r.systems {
		if len(s.scaling) > 0 {
			r.printScaling(w, s)
		}
	}
	r.printSideBySide(w)
	r.printSpread(w)
	r.printGrowth(w)
	if o.workloads["failover"] {
		fmt.Fprintf(w, "\nfailover: kill -9 of the leader until the next candidate's Campaign returns, session TTL %v, %d rounds, %d candidates waiting:\n", failoverTTL, o.failoverRounds, failoverWaiting)
		row("  failover p50 / p99 (ms)", func(s *sysResult) string {
			if len(s.failover.failover) == 0 {
				return "-"
			}
			return pair0(s.failover.failover.ms(.5), s.failover.failover.ms(.99))
		})
		row("  observer lag p50 / p99 (ms)", func(s *sysResult) string {
			if len(s.failover.observed) == 0 {
				return "-"
			}
			return pair0(s.failover.observed.ms(.5), s.failover.observed.ms(.99))
		})
		row("  failover min / max (ms)", func(s *sysResult) string {
			if len(s.failover.failover) == 0 {
				return "-"
			}
			return pair0(s.failover.failover.ms(0), s.failover.failover.ms(1))
		})
	}
	for _, s := range r.systems {
		if !s.bq {
			continue
		}
		overlaps := 0
		if s.contended != nil {
			overlaps += s.contended.Overlaps
		}
		for _, row := range s.scaling {
			overlaps += row.R.Overlaps
		}
		overlaps += spreadOverlaps(s.spread)
		if overlaps > 0 || s.fenceErrors > 0 {
			fmt.Fprintf(w, "\nWARNING: %s broke mutual exclusion (%d overlaps) or fencing (%d tokens out of order)\n", s.name, overlaps, s.fenceErrors)
		}
	}
	r.printShared(w)
	r.printTargets(w)
}

// printShared prints the readers and semaphore workloads (shared.go).
func (r *results) printShared(w io.Writer) {
	header := false
	for _, s := range r.systems {
		for _, x := range s.sharedRuns() {
			if x.res == nil {
				continue
			}
			if !header {
				fmt.Fprintf(w, "\nshared holdings (docs/protocol.md change 60): readers: %d readers (each in %v) and a writer (every %v) on one lock;\n"+
					"semaphore: %d clients on %d permits (each in %v). Reads are the readers' or permit holders' acquisitions.\n",
					r.opts.readers, readHold, writerThink, r.opts.semClients, r.opts.permits, readHold)
				fmt.Fprintf(w, "%-16s %-10s %9s %20s %8s %22s %9s %9s\n", "system", "workload", "reads/s", "read Lock p50/p99", "writes", "writer's wait p50/p99", "together", "overlaps")
				header = true
			}
			fmt.Fprintf(w, "%-16s %-10s %9s %20s %8d %22s %9d %9d\n", s.name, x.what, f1(x.res.readsPerSec()), pair(x.res.ReadLock.ms(.5), x.res.ReadLock.ms(.99)),
				x.res.Writes, pair(x.res.WriteLock.ms(.5), x.res.WriteLock.ms(.99)), x.res.Together, x.res.Overlaps)
			if x.res.Overlaps > 0 {
				fmt.Fprintf(w, "WARNING: %s's %s workload broke its mode's exclusion %d times\n", s.name, x.what, x.res.Overlaps)
			}
		}
	}
}

// printScaling prints s's scaling rows.
func (r *results) printScaling(w io.Writer, s *sysResult) {
	if s.bq {
		fmt.Fprintf(w, "\n%s, k contenders on one lock, %v each (×2 at 32, ×4 at 64); per acquisition: messages c→s/s→s/s→c, pushes to\n"+
			"waiters, bytes received by servers, commits, quorum accesses (of which LISTEN), CPU ms of the %d servers and of the client process:\n", s.name, r.opts.step, s.n)
		fmt.Fprintf(w, "%4s %8s %20s %8s %17s %6s %9s %7s %12s %8s %8s %6s %s\n",
			"k", "acq/s", "Lock p50/p99 ms", "handoff", "msgs", "push", "bytes", "commits", "acc (listen)", "srv ms", "cli ms", "fair", "votes/resets")
		for _, row := range s.scaling {
			st := s.stats(row.W, row.R.Acq)
			_, _, fair := row.R.fairness()
			fmt.Fprintf(w, "%4d %8s %20s %8s %17s %6s %9s %7s %12s %8s %8s %6s %.0f/%.0f\n", row.K, f1(row.R.opsPerSec()), pair(row.R.Lock.ms(.5), row.R.Lock.ms(.99)),
				f3(row.R.Handoff.ms(.5)), st.msgs(), f1(st.Pushes), f1(st.Bytes), f1(st.Fsyncs),
				fmt.Sprintf("%.2f (%.2f)", row.accessesPerAcq(s.n, "doorway", "ticket", "listen", "exit"), row.accessesPerAcq(s.n, "listen")),
				f3(st.ServerCPUms), f3(st.ClientCPUms), f3(fair), row.Step["bq_suspicions_total"], row.Step["bq_resets_total"])
		}
		return
	}
	fmt.Fprintf(w, "\n%s, k contenders on one lock, %v each (×2 at 32, ×4 at 64); per acquisition: client RPCs, bytes received by\n"+
		"members, WAL fsyncs, CPU ms of the %d members and of the client process:\n", s.name, r.opts.step, s.n)
	fmt.Fprintf(w, "%4s %8s %20s %8s %9s %9s %7s %8s %8s %6s\n", "k", "acq/s", "Lock p50/p99 ms", "handoff", "RPCs", "bytes", "fsyncs", "srv ms", "cli ms", "fair")
	for _, row := range s.scaling {
		st := s.stats(row.W, row.R.Acq)
		_, _, fair := row.R.fairness()
		fmt.Fprintf(w, "%4d %8s %20s %8s %9s %9s %7s %8s %8s %6s\n", row.K, f1(row.R.opsPerSec()), pair(row.R.Lock.ms(.5), row.R.Lock.ms(.99)),
			f3(row.R.Handoff.ms(.5)), f1(st.RPCs), f1(st.Bytes), f1(st.Fsyncs), f3(st.ServerCPUms), f3(st.ClientCPUms), f3(fair))
	}
}

// printSideBySide compares bq and etcd at each k both ran.
func (r *results) printSideBySide(w io.Writer) {
	bq, etcd := r.get("bq"), r.get("etcd")
	if bq == nil || etcd == nil || len(bq.scaling) == 0 || len(etcd.scaling) == 0 {
		return
	}
	fmt.Fprintf(w, "\nside by side, same k and window: acquisitions/s, Lock p99, CPU per acquisition (servers + client), fairness:\n")
	fmt.Fprintf(w, "%4s %9s %9s %7s %12s %12s %9s %9s %7s %7s\n", "k", "bq acq/s", "etcd", "bq/etcd", "bq p99 ms", "etcd p99 ms", "bq CPU", "etcd CPU", "bq fair", "etcd")
	for _, b := range bq.scaling {
		e := etcd.row(b.K)
		if e == nil {
			continue
		}
		bs, es := bq.stats(b.W, b.R.Acq), etcd.stats(e.W, e.R.Acq)
		_, _, bf := b.R.fairness()
		_, _, ef := e.R.fairness()
		fmt.Fprintf(w, "%4d %9s %9s %7s %12s %12s %9s %9s %7s %7s\n", b.K, f1(b.R.opsPerSec()), f1(e.R.opsPerSec()),
			f3(b.R.opsPerSec()/e.R.opsPerSec()), f3(b.R.Lock.ms(.99)), f3(e.R.Lock.ms(.99)), f3(bs.CPUms()), f3(es.CPUms()), f3(bf), f3(ef))
	}
}

// printSpread prints the spread rows side by side: one table for the
// systems at --servers, one for those at --larger.
func (r *results) printSpread(w io.Writer) {
	var main, larger []*sysResult
	for _, s := range r.systems {
		switch {
		case len(s.spread) == 0:
		case r.opts.larger > 0 && (s.name == r.largerName("bq") || s.name == r.largerName("etcd")):
			larger = append(larger, s)
		default:
			main = append(main, s)
		}
	}
	first := true
	for _, ss := range [][]*sysResult{main, larger} {
		if len(ss) == 0 {
			continue
		}
		if first {
			fmt.Fprintf(w, "\nspread: K clients each looping Lock → Unlock, on K locks (each its own) or on K/4 (client i on lock i mod K/4);\n"+
				"acquisitions/s over the window, Lock+Unlock p50/p99 (ms), CPU per acquisition of servers + client (ms), durable commits per acquisition (all servers):\n")
			first = false
		} else {
			fmt.Fprintln(w)
		}
		r.printSpreadOf(w, ss)
	}
}

// spreadRowOf is s's spread row of clients on names locks, or nil.
func (s *sysResult) spreadRowOf(clients, names int) *spreadRow {
	for i := range s.spread {
		if s.spread[i].Clients == clients && s.spread[i].Names == names {
			return &s.spread[i]
		}
	}
	return nil
}

func (r *results) printSpreadOf(w io.Writer, ss []*sysResult) {
	fmt.Fprintf(w, "%5s %5s %9s", "K", "locks", "window")
	for _, s := range ss {
		fmt.Fprintf(w, " | %10s %19s %8s %7s", s.name+" acq/s", "p50 / p99", "CPU", "commits")
	}
	if len(ss) == 2 {
		fmt.Fprint(w, " | bq/etcd")
	}
	fmt.Fprintln(w)
	var errs []string
	for _, row := range ss[0].spread {
		_, win := spreadTimes(r.opts.warm, r.opts.step, row.Clients)
		fmt.Fprintf(w, "%5d %5d %9s", row.Clients, row.Names, win)
		var ops []float64
		for _, s := range ss {
			x := s.spreadRowOf(row.Clients, row.Names)
			switch {
			case x == nil:
				fmt.Fprintf(w, " | %10s %19s %8s %7s", "-", "-", "-", "-")
				ops = append(ops, math.NaN())
			case x.Err != nil:
				fmt.Fprintf(w, " | %10s %19s %8s %7s", "error", "-", "-", "-")
				errs = append(errs, fmt.Sprintf("  %s, %d clients on %d locks: %s", s.name, x.Clients, x.Names, brief(x.Err)))
				ops = append(ops, math.NaN())
			default:
				st := s.stats(x.W, x.R.Acq)
				fmt.Fprintf(w, " | %10s %19s %8s %7s", f1(x.R.opsPerSec()), pair(x.R.Cycle.ms(.5), x.R.Cycle.ms(.99)), f3(st.CPUms()), f1(st.Fsyncs))
				ops = append(ops, x.R.opsPerSec())
			}
		}
		if len(ss) == 2 {
			fmt.Fprintf(w, " | %s", f3(ops[0]/ops[1]))
		}
		fmt.Fprintln(w)
	}
	for _, e := range errs {
		fmt.Fprintln(w, e)
	}
}

// printGrowth says how each system's rate and CPU per acquisition change
// from --servers to --larger, in the workloads both sizes ran.
func (r *results) printGrowth(w io.Writer) {
	lo := r.opts.largerRun()
	if lo == nil {
		return
	}
	var lines []string
	for _, base := range []string{"bq", "etcd"} {
		a, b := r.get(base), r.get(r.largerName(base))
		if a == nil || b == nil {
			continue
		}
		line := func(what string, ra, rb float64, sa, sb acqStats) {
			lines = append(lines, fmt.Sprintf("  %-5s %-26s %9s → %9s acq/s (× %s), CPU %7s → %7s ms per acquisition (× %s)",
				base, what, f1(ra), f1(rb), f3(rb/ra), f3(sa.CPUms()), f3(sb.CPUms()), f3(sb.CPUms()/sa.CPUms())))
		}
		if a.contended != nil && b.contended != nil {
			line(fmt.Sprintf("%d contenders", r.opts.contenders), a.contended.opsPerSec(), b.contended.opsPerSec(),
				a.stats(a.window, a.contended.Acq), b.stats(b.window, b.contended.Acq))
		}
		for _, y := range b.spread {
			x := a.spreadRowOf(y.Clients, y.Names)
			if x == nil || x.Err != nil || y.Err != nil {
				continue
			}
			line(fmt.Sprintf("spread, %d on %d locks", y.Clients, y.Names), x.R.opsPerSec(), y.R.opsPerSec(),
				a.stats(x.W, x.R.Acq), b.stats(y.W, y.R.Acq))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "\nfrom n = %d to n = %d (bq servers; etcd members %d to %d):\n", r.opts.servers, lo.servers, r.opts.etcdMembers, lo.etcdMembers)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// row returns s's scaling row for k contenders, or nil.
func (s *sysResult) row(k int) *scalingRow {
	for i := range s.scaling {
		if s.scaling[i].K == k {
			return &s.scaling[i]
		}
	}
	return nil
}

// busy is s's run with k contenders: its scaling row, or the contended run
// if it had k clients.
func (r *results) busy(s *sysResult, k int) (contendedResult, acqStats, bool) {
	if row := s.row(k); row != nil {
		return row.R, s.stats(row.W, row.R.Acq), true
	}
	if s.contended != nil && r.opts.contenders == k {
		return *s.contended, s.stats(s.window, s.contended.Acq), true
	}
	return contendedResult{}, acqStats{}, false
}

// target is one of the benchmark's targets (issue 29: ahead of etcd where
// a lock is busy, less CPU, many locks at once), measured.
type target struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Bound  string  `json:"bound"`
	Met    bool    `json:"met"`
	Detail string  `json:"detail,omitempty"`
}

// targets measures every target the run has the data for.
func (r *results) targets() []target {
	var out []target
	add := func(name string, v float64, bound string, ok bool, detail string) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			out = append(out, target{Name: name, Value: math.Round(v*1000) / 1000, Bound: bound, Met: ok, Detail: detail})
		}
	}
	bq, etcd := r.get("bq"), r.get("etcd")
	if bq == nil {
		return nil
	}
	if etcd != nil && bq.uncontended != nil && etcd.uncontended != nil {
		v := bq.uncontended.Cycle.ms(.5) / etcd.uncontended.Cycle.ms(.5)
		add("uncontended Lock+Unlock p50, bq/etcd", v, "≤ 1.0", v <= 1.0, "")
	}
	for _, k := range []struct {
		n     int
		ratio float64
	}{{8, 4}, {64, 1.5}} {
		b, bs, okb := r.busy(bq, k.n)
		if !okb {
			continue
		}
		_, _, fair := b.fairness()
		add(fmt.Sprintf("bq fairness max/min at %d contenders", k.n), fair, "≤ 1.1", fair <= 1.1, "")
		if k.n == 64 {
			v := bs.S2C
			add("bq server-to-client messages per acquisition at 64 contenders", v, fmt.Sprintf("≤ 3n = %d", 3*bq.n), v <= float64(3*bq.n),
				fmt.Sprintf("of which %.1f pushes to waiters", bs.Pushes))
			if b8, _, ok := r.busy(bq, 8); ok {
				v := b.opsPerSec() / b8.opsPerSec()
				add("bq acquisitions/s at 64 over at 8 contenders", v, "≥ 0.9", v >= 0.9, "")
			}
		}
		if etcd == nil {
			continue
		}
		e, es, oke := r.busy(etcd, k.n)
		if !oke {
			continue
		}
		v := b.opsPerSec() / e.opsPerSec()
		add(fmt.Sprintf("acquisitions/s at %d contenders, bq/etcd", k.n), v, fmt.Sprintf("≥ %.1f", k.ratio), v >= k.ratio,
			fmt.Sprintf("%.1f vs %.1f", b.opsPerSec(), e.opsPerSec()))
		v = bs.CPUms() / es.CPUms()
		add(fmt.Sprintf("CPU per acquisition (servers + client) at %d contenders, bq/etcd", k.n), v, "≤ 0.7", v <= 0.7,
			fmt.Sprintf("%.2f vs %.2f ms", bs.CPUms(), es.CPUms()))
	}
	// Many locks (issue 29): K = 64 clients, each on its own lock.
	if etcd != nil {
		b, okb := spreadRate(bq, 64)
		e, oke := spreadRate(etcd, 64)
		if okb && oke {
			add("spread: acquisitions/s of 64 clients on 64 locks, bq/etcd", b/e, "≥ 1.5", b/e >= 1.5, fmt.Sprintf("%.1f vs %.1f", b, e))
		}
	}
	// A larger cluster (issue 29.4): the contended rate at --larger over
	// the rate at --servers, with the same contenders.
	if big := r.get(r.largerName("bq")); r.opts.larger > 0 && big != nil && bq.contended != nil && big.contended != nil {
		v := big.contended.opsPerSec() / bq.contended.opsPerSec()
		bs, gs := bq.stats(bq.window, bq.contended.Acq), big.stats(big.window, big.contended.Acq)
		add(fmt.Sprintf("bq acquisitions/s with %d contenders at n = %d over n = %d", r.opts.contenders, big.n, bq.n), v, "≥ 0.6", v >= 0.6,
			fmt.Sprintf("%.1f vs %.1f; CPU per acquisition %.2f vs %.2f ms", big.contended.opsPerSec(), bq.contended.opsPerSec(), gs.CPUms(), bs.CPUms()))
	}
	return out
}

// spreadRate is s's aggregate acquisitions/s with k clients each on its
// own lock, if the run has that row.
func spreadRate(s *sysResult, k int) (float64, bool) {
	for _, row := range s.spread {
		if row.Clients == k && row.Names == k && row.Err == nil {
			return row.R.opsPerSec(), true
		}
	}
	return 0, false
}

func (r *results) printTargets(w io.Writer) {
	ts := r.targets()
	if len(ts) == 0 {
		return
	}
	fmt.Fprintln(w, "\ntargets:")
	for _, t := range ts {
		detail := ""
		if t.Detail != "" {
			detail = " (" + t.Detail + ")"
		}
		fmt.Fprintf(w, "  %s = %.3f%s (target %s): %s\n", t.Name, t.Value, detail, t.Bound, met(t.Met))
	}
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func cell(s *sysResult, f func(*sysResult) string) string {
	if s == nil {
		return "-"
	}
	return f(s)
}

func pair(a, b float64) string { return f3(a) + " / " + f3(b) }

// pair0 is pair in whole milliseconds.
func pair0(a, b float64) string {
	return strconv.FormatFloat(a, 'f', 0, 64) + " / " + strconv.FormatFloat(b, 'f', 0, 64)
}

func f3(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func f1(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// jnum rounds for JSON; NaN and ±Inf become null.
func jnum(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return math.Round(v*1000) / 1000
}

func (r *results) json() map[string]any {
	out := map[string]any{}
	for _, s := range r.systems {
		out[s.name] = s.json()
	}
	if ts := r.targets(); len(ts) > 0 {
		out["targets"] = ts
	}
	return out
}

func (s *sysResult) json() map[string]any {
	m := map[string]any{}
	if s.bq {
		m["n"], m["f"] = s.n, s.f
	} else {
		m["members"] = s.n
	}
	if u := s.uncontended; u != nil {
		m["uncontended_ops"] = len(u.Cycle)
		m["uncontended_p50_ms"], m["uncontended_p99_ms"] = jnum(u.Cycle.ms(.5)), jnum(u.Cycle.ms(.99))
		m["uncontended_lock_p50_ms"], m["uncontended_lock_p99_ms"] = jnum(u.Lock.ms(.5)), jnum(u.Lock.ms(.99))
		m["uncontended_unlock_p50_ms"], m["uncontended_unlock_p99_ms"] = jnum(u.Unlock.ms(.5)), jnum(u.Unlock.ms(.99))
		s.stats(s.uwindow, len(u.Cycle)).json(m, "uncontended_")
	}
	if c := s.contended; c != nil {
		mx, mn, f := c.fairness()
		m["contended_clients"] = len(c.PerClient)
		m["contended_seconds"] = jnum(c.Window.Seconds())
		m["contended_ops_per_s"] = jnum(c.opsPerSec())
		m["handoff_p50_ms"], m["handoff_p99_ms"] = jnum(c.Handoff.ms(.5)), jnum(c.Handoff.ms(.99))
		m["contended_lock_p50_ms"], m["contended_lock_p99_ms"] = jnum(c.Lock.ms(.5)), jnum(c.Lock.ms(.99))
		m["acquisitions_per_client_max"], m["acquisitions_per_client_min"] = mx, mn
		m["fairness_max_over_min"] = jnum(f)
		m["overlaps"] = c.Overlaps
		s.stats(s.window, c.Acq).json(m, "contended_")
	}
	if len(s.failover.failover) > 0 {
		m["failover_rounds"] = len(s.failover.failover)
		m["failover_ttl_ms"] = failoverTTL.Milliseconds()
		m["failover_p50_ms"], m["failover_p99_ms"] = jnum(s.failover.failover.ms(.5)), jnum(s.failover.failover.ms(.99))
		m["failover_min_ms"], m["failover_max_ms"] = jnum(s.failover.failover.ms(0)), jnum(s.failover.failover.ms(1))
		m["observer_lag_p50_ms"], m["observer_lag_p99_ms"] = jnum(s.failover.observed.ms(.5)), jnum(s.failover.observed.ms(.99))
	}
	if s.bq {
		m["fencing_errors"] = s.fenceErrors
		if len(s.byID) > 0 {
			m["acquisitions_by_client_id"] = s.byID
		}
	}
	if len(s.scaling) > 0 {
		var rows []map[string]any
		for _, row := range s.scaling {
			_, _, fair := row.R.fairness()
			x := map[string]any{
				"contenders":            row.K,
				"ops_per_s":             jnum(row.R.opsPerSec()),
				"lock_p50_ms":           jnum(row.R.Lock.ms(.5)),
				"lock_p99_ms":           jnum(row.R.Lock.ms(.99)),
				"handoff_p50_ms":        jnum(row.R.Handoff.ms(.5)),
				"handoff_p99_ms":        jnum(row.R.Handoff.ms(.99)),
				"fairness_max_over_min": jnum(fair),
				"overlaps":              row.R.Overlaps,
			}
			if s.bq {
				x["accesses_per_acq"] = jnum(row.accessesPerAcq(s.n, "doorway", "ticket", "listen", "exit"))
				x["listens_per_acq"] = jnum(row.accessesPerAcq(s.n, "listen"))
				x["suspicions"] = row.Step["bq_suspicions_total"]
				x["resets"] = row.Step["bq_resets_total"]
				x["rejected"] = row.Step["bq_rejected_total"]
				x["stale"] = row.Step["bq_stale_total"]
			}
			s.stats(row.W, row.R.Acq).json(x, "")
			rows = append(rows, x)
		}
		m["scaling"] = rows
	}
	for _, x := range s.sharedRuns() {
		if x.res == nil {
			continue
		}
		m[x.what] = map[string]any{
			"seconds": jnum(x.res.Window.Seconds()), "reads_per_s": jnum(x.res.readsPerSec()), "reads": x.res.Reads, "writes": x.res.Writes,
			"read_lock_p50_ms": jnum(x.res.ReadLock.ms(.5)), "read_lock_p99_ms": jnum(x.res.ReadLock.ms(.99)),
			"writer_wait_p50_ms": jnum(x.res.WriteLock.ms(.5)), "writer_wait_p99_ms": jnum(x.res.WriteLock.ms(.99)),
			"together": x.res.Together, "overlaps": x.res.Overlaps, "permits": x.res.Permits,
		}
	}
	if len(s.spread) > 0 {
		var rows []map[string]any
		for _, row := range s.spread {
			x := map[string]any{"clients": row.Clients, "names": row.Names}
			if row.Err != nil {
				x["error"] = brief(row.Err)
				rows = append(rows, x)
				continue
			}
			st := s.stats(row.W, row.R.Acq)
			mx, mn, _ := row.R.fairness()
			x["seconds"] = jnum(row.R.Window.Seconds())
			x["ops_per_s"] = jnum(row.R.opsPerSec())
			x["p50_ms"], x["p99_ms"] = jnum(row.R.Cycle.ms(.5)), jnum(row.R.Cycle.ms(.99))
			x["lock_p50_ms"], x["lock_p99_ms"] = jnum(row.R.Lock.ms(.5)), jnum(row.R.Lock.ms(.99))
			x["cpu_ms_per_acq"] = jnum(st.CPUms())
			x["commits_per_acq"] = jnum(st.Fsyncs)
			x["server_cpu_ms_per_acq"], x["client_cpu_ms_per_acq"] = jnum(st.ServerCPUms), jnum(st.ClientCPUms)
			x["acquisitions_per_client_max"], x["acquisitions_per_client_min"] = mx, mn
			x["overlaps"] = row.R.Overlaps
			rows = append(rows, x)
		}
		m["spread"] = rows
	}
	return m
}
