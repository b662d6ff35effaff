package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
)

// The attack benchmark's report: the table, the per-server readings, the
// targets and the JSON (attack.go runs the phases).

// maxOf is the largest value, NaN when empty.
func maxOf(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return slices.Max(v)
}

func perServer(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	var s []string
	for _, x := range v {
		s = append(s, f1(x/mb))
	}
	return strings.Join(s, "/")
}

func (r *attackReport) print(w io.Writer) {
	a := r.opts.atk
	fmt.Fprintf(w, "\nbq under attack on one machine: nproc=%d, kernel %s, CPU %s\n", r.env.nproc, r.env.kernel, r.env.cpu)
	fmt.Fprintf(w, "load average before %s, after %s; %s; started %s\n", r.env.loadBefore, r.env.loadAfter, r.env.goVersion, r.env.started)
	fmt.Fprintf(w, "n=4 f=1, 4 bqserver processes with their default limits; the attackers and the legitimate client are goroutines of the\n"+
		"bench process on the same 2 cores, all from 127.0.0.1. Waves of %d identities (%d at a time); floods %v; %d unenrolled attempts;\n"+
		"idle %v after each wave. The legitimate client starts a Lock+Unlock on \"legit\" at most every %v.\n",
		a.identities, a.concurrency, a.flood, a.unenrolled, a.idle, a.legitEvery)
	fmt.Fprintf(w, "Memory: the largest of the 4 servers; live = minimum of 3 scrapes 1 s apart, peak = maximum of scrapes every second.\n\n")
	fmt.Fprintf(w, "%-18s %16s %6s %6s %18s %8s %8s %5s %8s %8s %8s %9s\n",
		"phase", "legit Lock p50/p99", "×base", "errs", "attack ops", "refused", "other", "mem", "heap MB", "RSS MB", "data MB", "CPU s/c %")
	for _, p := range r.phases {
		lat, ratio, errs := "-", "-", "-"
		if len(p.Legit) > 0 || p.Errors > 0 {
			lat, errs = pair(p.Legit.ms(.5), p.Legit.ms(.99)), fmt.Sprint(p.Errors)
			ratio = f3(p.ratio())
			if p.Kind == kindBaseline {
				ratio = "1"
			}
		}
		ops, refused, other := "-", "-", "-"
		if p.Kind == kindAttack {
			ops, refused, other = fmt.Sprintf("%d %s", p.Done, p.Unit), fmt.Sprint(p.Refused), fmt.Sprint(p.Other)
		}
		cpu := "-"
		if p.Seconds > 0 {
			cpu = fmt.Sprintf("%.0f/%.0f", 100*p.SrvCPU/p.Seconds, 100*p.CliCPU/p.Seconds)
		}
		fmt.Fprintf(w, "%-18s %16s %6s %6s %18s %8s %8s %5s %8s %8s %8s %9s\n", p.Name, lat, ratio, errs, ops, refused, other, p.Mem,
			f1(maxOf(p.Heap)/mb), f1(maxOf(p.RSS)/mb), f1(maxOf(p.Data)/mb), cpu)
	}
	fmt.Fprintf(w, "\n(CPU: the 4 servers' / the bench process's CPU time over the phase's wall time; 200%% is both cores.)\n")
	fmt.Fprintf(w, "\nper server (s0/s1/s2/s3), MB; GC goal = go_memstats_next_gc_bytes, twice the heap the last collection found live:\n")
	fmt.Fprintf(w, "%-18s %23s %23s %23s %23s\n", "phase", "heap", "GC goal", "RSS", "data")
	for _, p := range r.phases {
		fmt.Fprintf(w, "%-18s %23s %23s %23s %23s\n", p.Name, perServer(p.Heap), perServer(p.Goal), perServer(p.RSS), perServer(p.Data))
	}
	fmt.Fprintf(w, "\nbq_limit_refusals_total by limit, all servers, at the end of each phase (cumulative per cluster); live locks and members:\n")
	for _, p := range r.phases {
		var parts []string
		for _, k := range slices.Sorted(mapsKeys(p.Refusals)) {
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, p.Refusals[k]))
		}
		if len(parts) == 0 {
			parts = []string{"none"}
		}
		fmt.Fprintf(w, "  %-18s %s; locks %.0f, members %.0f, statements verified %.0f\n", p.Name, strings.Join(parts, " "),
			p.Gauges["locks_in_use"], p.Gauges["active_set_members"], p.Gauges["statements_verified"])
	}
	if len(r.stores) > 0 {
		fmt.Fprintf(w, "\nthe open cluster's bq.db once stopped, per bucket: records (KB of keys and values), s0/s1/s2/s3:\n")
		var names []string
		for name := range r.stores[0] {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			var parts []string
			for _, st := range r.stores {
				parts = append(parts, fmt.Sprintf("%d (%.0f)", st[name].Records, float64(st[name].Bytes)/1024))
			}
			fmt.Fprintf(w, "  %-10s %s\n", name, strings.Join(parts, " / "))
		}
	}
	fmt.Fprintf(w, "\nattack details:\n")
	for _, p := range r.phases {
		if len(p.Details) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s:\n", p.Name)
		keys := slices.Sorted(mapsKeys(p.Details))
		sort.SliceStable(keys, func(i, j int) bool { return p.Details[keys[i]] > p.Details[keys[j]] })
		for i, k := range keys {
			if i == 12 {
				fmt.Fprintf(w, "    ... %d more kinds\n", len(keys)-i)
				break
			}
			fmt.Fprintf(w, "    %8d  %s\n", p.Details[k], k)
		}
	}
	r.printTargets(w)
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func growth(after, before []float64) (worst float64, server int) {
	worst, server = math.NaN(), -1
	for i := range min(len(after), len(before)) {
		g := after[i]/before[i] - 1
		if server < 0 || g > worst {
			worst, server = g, i
		}
	}
	return worst, server
}

func (r *attackReport) targets() attackTargets {
	t := attackTargets{lockRatio: math.NaN(), heapGrowth: math.NaN(), heap2: math.NaN(), data2: math.NaN()}
	attacks := 0
	for _, p := range r.phases {
		if p.Kind != kindAttack {
			continue
		}
		attacks++
		x := p.ratio()
		if math.IsNaN(x) { // the legitimate client got nothing done
			x = math.Inf(1)
		}
		if math.IsNaN(t.lockRatio) || x > t.lockRatio {
			t.lockRatio, t.LockRatioPhase = x, p.Name
		}
	}
	base, a1, a2 := r.find(phBaseline), r.find(phAfter1), r.find(phAfter2)
	if base != nil {
		for _, a := range []*attackPhase{a1, a2} {
			if a == nil {
				continue
			}
			if g, s := growth(a.Heap, base.Heap); s >= 0 && (math.IsNaN(t.heapGrowth) || g > t.heapGrowth) {
				t.heapGrowth, t.heapWhere = g, fmt.Sprintf("%s, server %d", a.Name, s)
			}
		}
	}
	if a1 != nil && a2 != nil {
		var s int
		t.heap2, s = growth(a2.Heap, a1.Heap)
		t.heap2Where = fmt.Sprintf("server %d", s)
		t.data2, s = growth(a2.Data, a1.Data)
		t.data2Where = fmt.Sprintf("server %d", s)
	}
	t.complete = attacks == 5 && a1 != nil && a2 != nil
	return t
}

func (r *attackReport) printTargets(w io.Writer) {
	t := r.targets()
	fmt.Fprintf(w, "\ntargets:\n")
	var ratios []string
	for _, p := range r.phases {
		if p.Kind == kindAttack {
			ratios = append(ratios, fmt.Sprintf("%s %s", p.Name, f3(p.ratio())))
		}
	}
	fmt.Fprintf(w, "  (a) legitimate Lock p50 under every attack ≤ 2 × its baseline: worst %s (%s): %s\n      (%s)\n",
		f3(t.lockRatio), t.LockRatioPhase, met(t.lockRatio <= 2 && t.complete), strings.Join(ratios, ", "))
	fmt.Fprintf(w, "  (b) live heap %v after a wave ≤ baseline + 20%%: worst %+.1f%% (%s): %s\n",
		r.opts.atk.idle, 100*t.heapGrowth, t.heapWhere, met(t.heapGrowth <= 0.2 && t.complete))
	fmt.Fprintf(w, "  (c) second wave grows heap and data ≤ 10%%: heap %+.1f%% (%s), data %+.1f%% (%s): %s\n",
		100*t.heap2, t.heap2Where, 100*t.data2, t.data2Where, met(t.heap2 <= 0.1 && t.data2 <= 0.1 && t.complete))
	if !t.complete {
		fmt.Fprintf(w, "  (the run did not complete: a target is met only by a complete run)\n")
	}
}

func (r *attackReport) json() map[string]any {
	var phases []map[string]any
	for _, p := range r.phases {
		x := map[string]any{
			"phase": p.Name, "kind": p.Kind, "memory": p.Mem,
			"legit_cycles": p.Cycles, "legit_errors": p.Errors,
			"legit_lock_p50_ms": jnum(p.Legit.ms(.5)), "legit_lock_p99_ms": jnum(p.Legit.ms(.99)),
			"heap_bytes": p.Heap, "rss_bytes": p.RSS, "data_bytes": p.Data, "gc_goal_bytes": p.Goal,
			"limit_refusals": p.Refusals, "gauges": p.Gauges,
			"seconds": jnum(p.Seconds), "server_cpu_s": jnum(p.SrvCPU), "client_cpu_s": jnum(p.CliCPU),
		}
		if p.Kind == kindAttack {
			x["ratio_to_baseline"] = jnum(p.ratio())
			x["done"], x["refused"], x["other"], x["unit"] = p.Done, p.Refused, p.Other, p.Unit
			x["details"] = p.Details
		}
		phases = append(phases, x)
	}
	t := r.targets()
	a := r.opts.atk
	return map[string]any{"attack": map[string]any{
		"identities": a.identities, "concurrency": a.concurrency, "flood_s": a.flood.Seconds(), "idle_s": a.idle.Seconds(),
		"unenrolled": a.unenrolled, "legit_every_ms": a.legitEvery.Milliseconds(),
		"phases": phases, "open_cluster_stores": r.stores,
		"targets": map[string]any{
			"lock_p50_ratio_max": jnum(t.lockRatio), "lock_p50_ratio_met": t.lockRatio <= 2 && t.complete,
			"heap_growth_after": jnum(t.heapGrowth), "heap_growth_after_met": t.heapGrowth <= 0.2 && t.complete,
			"second_wave_heap_growth": jnum(t.heap2), "second_wave_data_growth": jnum(t.data2),
			"second_wave_met": t.heap2 <= 0.1 && t.data2 <= 0.1 && t.complete,
		},
	}}
}
