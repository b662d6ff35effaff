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
	env      env
	opts     *options
	bq, etcd *sysResult
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
}

func (s *sysResult) stats(w window, acq int) acqStats {
	m := w.Metrics
	st := acqStats{ServerCPUms: 1000 * perAcq(w.ServerCPU, acq), ClientCPUms: 1000 * perAcq(w.ClientCPU, acq)}
	st.C2S, st.S2S, st.S2C, st.RPCs = math.NaN(), math.NaN(), math.NaN(), math.NaN()
	var fsyncs, fsyncSum float64
	switch s.name {
	case "bq":
		fsyncs, fsyncSum = sumSeries(m, "bq_fsync_seconds_count"), sumSeries(m, "bq_fsync_seconds_sum")
		st.C2S = perAcq(m[`bq_messages_in_total{from="client"}`], acq)
		st.S2S = perAcq(m[`bq_messages_in_total{from="server"}`], acq)
		st.S2C = perAcq(m[`bq_messages_out_total{to="client"}`], acq)
		st.Bytes = perAcq(sumSeries(m, "bq_bytes_in_total"), acq)
		st.BytesS2S = perAcq(m[`bq_bytes_in_total{from="server"}`], acq)
	case "etcd":
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
	}
	if !math.IsNaN(st.RPCs) {
		m[prefix+"rpcs_per_acq"] = jnum(st.RPCs)
	}
}

// accessesPerAcq is the quorum accesses of the kinds per acquisition: each
// access goes to every server, so the servers' total is divided by n.
func (row scalingRow) accessesPerAcq(kinds ...string) float64 {
	var sum float64
	for k, v := range row.Accesses {
		if slices.Contains(kinds, k) {
			sum += v
		}
	}
	return perAcq(sum/bqServers, row.R.All)
}

func (r *results) print(w io.Writer) {
	o := r.opts
	fmt.Fprintf(w, "\nbq vs etcd v3.7 on one machine: nproc=%d, kernel %s, CPU %s\n", r.env.nproc, r.env.kernel, r.env.cpu)
	fmt.Fprintf(w, "load average before %s, after %s; %s; started %s\n", r.env.loadBefore, r.env.loadAfter, r.env.goVersion, r.env.started)
	fmt.Fprintf(w, "bq: n=4 f=1, 4 bqserver processes, WAL + fdatasync (bbolt behind it), QUIC on loopback, Ed25519.\n")
	fmt.Fprintf(w, "etcd: 3 members (embed, one process each), default fsync; concurrency.Mutex, one session per client.\n")
	fmt.Fprintf(w, "Per-acquisition counters are sums over all servers, in the measured window. Messages: c→s/s→s/s→c (bq),\n"+
		"client RPCs (etcd). Commits: WAL group commits, one fdatasync each (bq, applied to bbolt in the background); WAL fsyncs (etcd).\n\n")
	row := func(label string, f func(*sysResult) string) {
		fmt.Fprintf(w, "%-44s %18s %18s\n", label, cell(r.bq, f), cell(r.etcd, f))
	}
	fmt.Fprintf(w, "%-44s %18s %18s\n", "", "bq", "etcd")
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
		if r.bq != nil && len(r.bq.byID) > 0 {
			fmt.Fprintf(w, "  bq acquisitions per client, in ClientID order: %v\n", r.bq.byID)
		}
		statRows(func(s *sysResult) (acqStats, bool) {
			if s.contended == nil {
				return acqStats{}, false
			}
			return s.stats(s.window, s.contended.Acq), true
		}, "acq")
		row("  overlapping holders (must be 0)", c(func(x *contendedResult) string { return fmt.Sprint(x.Overlaps) }))
	}
	if r.bq != nil && len(r.bq.scaling) > 0 {
		fmt.Fprintf(w, "\nbq alone, k contenders on one lock, %v each (×2 at 32, ×4 at 64); per acquisition: messages c→s/s→s/s→c, bytes received by\n"+
			"servers, commits, quorum accesses (of which LISTEN), CPU ms of the 4 servers and of the client process:\n", o.step)
		fmt.Fprintf(w, "%4s %8s %18s %8s %17s %9s %7s %12s %8s %8s %6s %s\n",
			"k", "acq/s", "Lock p50/p99 ms", "handoff", "msgs", "bytes", "commits", "acc (listen)", "srv ms", "cli ms", "fair", "votes/resets")
		for _, s := range r.bq.scaling {
			st := r.bq.stats(s.W, s.R.Acq)
			_, _, fair := s.R.fairness()
			fmt.Fprintf(w, "%4d %8s %18s %8s %17s %9s %7s %12s %8s %8s %6s %.0f/%.0f\n", s.K, f1(s.R.opsPerSec()), pair(s.R.Lock.ms(.5), s.R.Lock.ms(.99)),
				f3(s.R.Handoff.ms(.5)), st.msgs(), f1(st.Bytes), f1(st.Fsyncs),
				fmt.Sprintf("%.2f (%.2f)", s.accessesPerAcq("doorway", "ticket", "listen", "exit"), s.accessesPerAcq("listen")),
				f3(st.ServerCPUms), f3(st.ClientCPUms), f3(fair), s.Step["bq_suspicions_total"], s.Step["bq_resets_total"])
		}
	}
	if r.bq != nil {
		overlaps := 0
		if r.bq.contended != nil {
			overlaps += r.bq.contended.Overlaps
		}
		for _, s := range r.bq.scaling {
			overlaps += s.R.Overlaps
		}
		if overlaps > 0 || r.bq.fenceErrors > 0 {
			fmt.Fprintf(w, "\nWARNING: bq broke mutual exclusion (%d overlaps) or fencing (%d tokens out of order)\n", overlaps, r.bq.fenceErrors)
		}
	}
	r.printTargets(w)
}

func (r *results) printTargets(w io.Writer) {
	if r.bq == nil || r.etcd == nil {
		return
	}
	fmt.Fprintln(w, "\ntargets:")
	if r.bq.uncontended != nil && r.etcd.uncontended != nil {
		ratio := r.bq.uncontended.Cycle.ms(.5) / r.etcd.uncontended.Cycle.ms(.5)
		fmt.Fprintf(w, "  uncontended Lock+Unlock p50, bq/etcd = %.2f (target ≤ 0.5): %s\n", ratio, met(ratio <= 0.5))
	}
	if r.bq.contended != nil && r.etcd.contended != nil {
		ratio := r.bq.contended.opsPerSec() / r.etcd.contended.opsPerSec()
		fmt.Fprintf(w, "  contended acquisitions/s, bq/etcd = %.2f (target ≥ 10): %s\n", ratio, met(ratio >= 10))
		_, _, f := r.bq.contended.fairness()
		fmt.Fprintf(w, "  bq fairness max/min = %.3f (target ≤ 1.1): %s\n", f, met(f <= 1.1))
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
	for _, s := range []*sysResult{r.bq, r.etcd} {
		if s != nil {
			out[s.name] = s.json()
		}
	}
	return out
}

func (s *sysResult) json() map[string]any {
	m := map[string]any{}
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
	if s.name == "bq" {
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
				"accesses_per_acq":      jnum(row.accessesPerAcq("doorway", "ticket", "listen", "exit")),
				"listens_per_acq":       jnum(row.accessesPerAcq("listen")),
				"fairness_max_over_min": jnum(fair),
				"overlaps":              row.R.Overlaps,
				"suspicions":            row.Step["bq_suspicions_total"],
				"resets":                row.Step["bq_resets_total"],
				"rejected":              row.Step["bq_rejected_total"],
				"stale":                 row.Step["bq_stale_total"],
			}
			s.stats(row.W, row.R.Acq).json(x, "")
			rows = append(rows, x)
		}
		m["scaling"] = rows
	}
	return m
}
