package nemesis

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The checker is checked on histories the scenarios recorded (testdata,
// kept with -nemesis.keep) at commit 46aab74, before docs/protocol.md
// change 34, each fault planted in a clean one:
//
//   - flapping: TestFlapping for 40 s, clean: 47 commands, two of them
//     stopped by SIGTERM when their holder lost the lock;
//   - holder-ignore: TestIsolatedHolder/term=ignore, three trials: in the
//     first two the killed holder died ~20 ms before its successor started,
//     in the third it outlived its lock by 88 ms (issue 27, point 2).

// recorded loads testdata/NAME.{history,counter}.
func recorded(t *testing.T, name string) ([]Record, []Write) {
	t.Helper()
	h, err := os.ReadFile(filepath.Join("testdata", name+".history"))
	require.NoError(t, err)
	c, err := os.ReadFile(filepath.Join("testdata", name+".counter"))
	require.NoError(t, err)
	hist, err := ParseHistory(strings.NewReader(string(h)))
	require.NoError(t, err)
	ws, err := ParseCounter(strings.NewReader(string(c)))
	require.NoError(t, err)
	return hist, ws
}

// cleanHolder is holder-ignore up to its third trial: two killed holders,
// each dead before its successor started.
func cleanHolder(t *testing.T) ([]Record, []Write) {
	hist, ws := recorded(t, "holder-ignore")
	for i, r := range hist {
		if r.Kind == "note" && strings.HasPrefix(r.Attrs["text"], "trial 2:") {
			hist = hist[:i]
			break
		}
	}
	starters := map[string]bool{}
	for _, r := range hist {
		if r.Kind == "start" {
			starters[r.Token] = true
		}
	}
	var kept []Write
	for _, w := range ws {
		if starters[w.Token] {
			kept = append(kept, w)
		}
	}
	return hist, kept
}

// clone copies a history so a plant does not touch the original.
func clone(hist []Record) []Record {
	out := make([]Record, len(hist))
	for i, r := range hist {
		r.Attrs = map[string]string{}
		for k, v := range hist[i].Attrs {
			r.Attrs[k] = v
		}
		out[i] = r
	}
	return out
}

// find is the index of the first record of kind for token (or, with token
// "", of client), from index from on; -1 if none.
func find(hist []Record, from int, kind, token, client string) int {
	for i := from; i < len(hist); i++ {
		r := hist[i]
		if r.Kind == kind && (token == "" || r.Token == token) && (client == "" || r.Client == client) {
			return i
		}
	}
	return -1
}

// killed is the first command closed by its death, and the command that
// started next.
func killed(t *testing.T, hist []Record) (dead, next Command) {
	t.Helper()
	rep := Check(hist, nil)
	for i, c := range rep.Commands {
		if c.ClosedBy == "dead" && i+1 < len(rep.Commands) {
			return c, rep.Commands[i+1]
		}
	}
	t.Fatal("no killed command in the history")
	return
}

func TestCheckerRecordedHistories(t *testing.T) {
	hist, ws := recorded(t, "flapping")
	rep := Check(hist, ws)
	require.True(t, rep.OK(), "%v", rep)
	require.Len(t, rep.Commands, 47)
	require.Equal(t, 45, rep.Increments)
	terms := 0
	for _, c := range rep.Commands {
		if c.How == "term" {
			terms++
		}
	}
	require.Equal(t, 2, terms, "commands stopped by SIGTERM")

	hist, ws = cleanHolder(t)
	rep = Check(hist, ws)
	require.True(t, rep.OK(), "%v", rep)
	dead, next := killed(t, hist)
	require.Equal(t, "ignore", dead.Term)
	require.Less(t, dead.Close, next.Start)

	// The whole recording: its third trial is issue 27's overlap, and the
	// checker finds it and nothing else.
	hist, ws = recorded(t, "holder-ignore")
	rep = Check(hist, ws)
	require.False(t, rep.OK())
	require.Len(t, rep.Overlaps, 1, "%v", rep)
	o := rep.Overlaps[0]
	require.Equal(t, "ignore", o.Earlier.Term)
	require.Equal(t, "dead", o.Earlier.ClosedBy)
	require.InDelta(t, 88*time.Millisecond, o.By(), float64(time.Millisecond), "%v", o)
	require.Empty(t, rep.OutOfOrder)
	require.Empty(t, rep.StaleWrites)
	require.Equal(t, rep.Increments, rep.Final)
	require.Empty(t, rep.Problems)
}

// Each fault planted in a clean recorded history is found, and named as
// what it is (no other kind of fault is reported).
func TestCheckerFindsPlantedFaults(t *testing.T) {
	type plant func(t *testing.T, hist []Record, ws []Write) ([]Record, []Write)
	cases := []struct {
		name, base string
		plant      plant
		want       func(t *testing.T, r Report)
	}{{
		name: "a start inside another command", base: "flapping",
		plant: func(t *testing.T, hist []Record, ws []Write) ([]Record, []Write) {
			rep := Check(hist, ws)
			a, b := rep.Commands[10], rep.Commands[11]
			i := find(hist, 0, "start", b.Token, "")
			hist[i].NS = (a.Start + a.Close) / 2
			return hist, ws
		},
		want: func(t *testing.T, r Report) { requireOnly(t, r, "overlap") },
	}, {
		name: "an end after the next start (the command ran on)", base: "flapping",
		plant: func(t *testing.T, hist []Record, ws []Write) ([]Record, []Write) {
			rep := Check(hist, ws)
			a, b := rep.Commands[20], rep.Commands[21]
			hist[find(hist, 0, "end", a.Token, "")].NS = b.Start + int64(time.Millisecond)
			if i := find(hist, 0, "dead", a.Token, ""); i >= 0 {
				hist[i].NS = b.Start + 2*int64(time.Millisecond)
			}
			return hist, ws
		},
		want: func(t *testing.T, r Report) {
			requireOnly(t, r, "overlap")
			require.Equal(t, time.Millisecond, r.Overlaps[0].By())
		},
	}, {
		name: "a killed command that died after its successor started", base: "holder",
		plant: func(t *testing.T, hist []Record, ws []Write) ([]Record, []Write) {
			dead, next := killed(t, hist)
			hist[find(hist, 0, "dead", dead.Token, "")].NS = next.Start + 70*int64(time.Millisecond)
			return hist, ws
		},
		want: func(t *testing.T, r Report) {
			requireOnly(t, r, "overlap")
			require.Equal(t, "dead", r.Overlaps[0].Earlier.ClosedBy)
			require.Equal(t, 70*time.Millisecond, r.Overlaps[0].By())
		},
	}, {
		name: "a killed command whose death was not seen: open until its client's next record", base: "holder",
		plant: func(t *testing.T, hist []Record, ws []Write) ([]Record, []Write) {
			dead, next := killed(t, hist)
			i := find(hist, 0, "dead", dead.Token, "")
			hist = append(hist[:i:i], hist[i+1:]...)
			// Its bqclient's exit is the next record of its client:
			// planted after the successor's start.
			j := find(hist, i, "exit", "", dead.Client)
			hist[j].NS = next.Start + 5*int64(time.Millisecond)
			return hist, ws
		},
		want: func(t *testing.T, r Report) {
			requireOnly(t, r, "overlap")
			require.Equal(t, "next", r.Overlaps[0].Earlier.ClosedBy)
			require.Equal(t, 5*time.Millisecond, r.Overlaps[0].By())
		},
	}, {
		name: "a command with no end, no death, no later record: open for ever", base: "flapping",
		plant: func(t *testing.T, hist []Record, ws []Write) ([]Record, []Write) {
			rep := Check(hist, ws)
			a := rep.Commands[len(rep.Commands)-2]
			var kept []Record
			for _, r := range hist {
				if (r.Kind != "start" && r.Token == a.Token) || (r.Kind == "exit" && r.Client == a.Client && r.NS > a.Start) {
					continue
				}
				kept = append(kept, r)
			}
			return kept, ws
		},
		want: func(t *testing.T, r Report) {
			requireOnly(t, r, "overlap")
			require.Equal(t, "never", r.Overlaps[0].Earlier.ClosedBy)
			require.Equal(t, time.Duration(-1), r.Overlaps[0].By())
		},
	}, {
		name: "two tokens swapped", base: "flapping",
		plant: func(t *testing.T, hist []Record, ws []Write) ([]Record, []Write) {
			rep := Check(hist, ws)
			a, b := rep.Commands[5].Token, rep.Commands[6].Token
			for i := range hist {
				switch hist[i].Token {
				case a:
					hist[i].Token = b
				case b:
					hist[i].Token = a
				}
			}
			for i := range ws {
				switch ws[i].Token {
				case a:
					ws[i].Token = b
				case b:
					ws[i].Token = a
				}
			}
			return hist, ws
		},
		want: func(t *testing.T, r Report) { requireOnly(t, r, "order") },
	}, {
		name: "a token repeated", base: "holder",
		plant: func(t *testing.T, hist []Record, ws []Write) ([]Record, []Write) {
			rep := Check(hist, ws)
			a, b := rep.Commands[0].Token, rep.Commands[1].Token
			for i := range hist {
				if hist[i].Token == b {
					hist[i].Token = a
				}
			}
			return hist, ws[1:] // b's write goes: its token is a's now
		},
		want: func(t *testing.T, r Report) {
			require.NotEmpty(t, r.OutOfOrder, "%v", r)
			require.Empty(t, r.Overlaps, "%v", r)
		},
	}, {
		name: "an increment that read a stale value (lost update)", base: "flapping",
		plant: func(t *testing.T, hist []Record, ws []Write) ([]Record, []Write) {
			for i := 30; i < len(ws); i++ {
				ws[i].Value--
			}
			return hist, ws
		},
		want: func(t *testing.T, r Report) {
			requireOnly(t, r, "lost")
			require.Equal(t, 1, r.LostUpdates())
			require.Len(t, r.StaleWrites, 1)
			require.Equal(t, 31, r.StaleWrites[0].Line)
		},
	}, {
		name: "an increment that vanished", base: "flapping",
		plant: func(t *testing.T, hist []Record, ws []Write) ([]Record, []Write) {
			return hist, append(ws[:10:10], ws[11:]...)
		},
		want: func(t *testing.T, r Report) {
			requireOnly(t, r, "lost")
			require.Equal(t, -1, r.LostUpdates())
		},
	}, {
		name: "an end without a start", base: "flapping",
		plant: func(t *testing.T, hist []Record, ws []Write) ([]Record, []Write) {
			i := find(hist, 0, "start", "", "")
			hist = append(hist[:i:i], hist[i+1:]...)
			return hist, ws
		},
		want: func(t *testing.T, r Report) { requireOnly(t, r, "problem") },
	}, {
		name: "a write by a token that never started", base: "flapping",
		plant: func(t *testing.T, hist []Record, ws []Write) ([]Record, []Write) {
			ws[3].Token = "12345"
			return hist, ws
		},
		want: func(t *testing.T, r Report) { requireOnly(t, r, "problem") },
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hist []Record
			var ws []Write
			if tc.base == "holder" {
				hist, ws = cleanHolder(t)
			} else {
				hist, ws = recorded(t, tc.base)
			}
			require.True(t, Check(hist, ws).OK(), "the base history is clean")
			hist, ws = tc.plant(t, clone(hist), append([]Write(nil), ws...))
			r := Check(hist, ws)
			require.False(t, r.OK(), "the planted fault was not found")
			tc.want(t, r)
			t.Logf("found: %v", r)
		})
	}
}

// requireOnly requires r to report faults of kind only: overlap, order, lost
// or problem.
func requireOnly(t *testing.T, r Report, kind string) {
	t.Helper()
	got := map[string]bool{
		"overlap": len(r.Overlaps) > 0,
		"order":   len(r.OutOfOrder) > 0,
		"lost":    r.Final != r.Increments || len(r.StaleWrites) > 0,
		"problem": len(r.Problems) > 0,
	}
	for k, v := range got {
		require.Equal(t, k == kind, v, "fault %s reported: %v; the report:\n%v", k, v, r)
	}
}

func TestParseHistoryRefusesGarbage(t *testing.T) {
	for _, line := range []string{
		"start",
		"start 12 x client=c0",
		"start 1x 12 client=c0",
		"start 12 34",
		"end 12 34 c0",
		"exit - 34",
		"begin 12 34 client=c0",
	} {
		_, err := ParseHistory(strings.NewReader(line + "\n"))
		require.Error(t, err, line)
	}
	_, err := ParseCounter(strings.NewReader("12\n"))
	require.Error(t, err)
	recs, err := ParseHistory(strings.NewReader("note - 5 isolate [s0] for 1s\n\nstart 7 6 client=c1 pid=3 term=obey\n"))
	require.NoError(t, err)
	require.Equal(t, "isolate [s0] for 1s", recs[0].Attrs["text"])
	require.Equal(t, Record{Line: 3, Kind: "start", Token: "7", NS: 6, Client: "c1", Attrs: map[string]string{"client": "c1", "pid": "3", "term": "obey"}}, recs[1])
}

// docs/protocol.md change 60: readers' commands (mode=shared) may overlap
// each other, never a writer's; a writer's token exceeds every earlier
// start's, a reader's every earlier writer's; readers leave the counter
// alone.
func TestCheckerReadsModes(t *testing.T) {
	check := func(hist, counter string) Report {
		t.Helper()
		h, err := ParseHistory(strings.NewReader(hist))
		require.NoError(t, err)
		w, err := ParseCounter(strings.NewReader(counter))
		require.NoError(t, err)
		return Check(h, w)
	}
	readers := `start 5 100 client=c0 pid=1 term=obey mode=shared
start 4 110 client=c1 pid=2 term=obey mode=shared
end 5 200 client=c0 how=done
end 4 210 client=c1 how=done
start 9 300 client=c2 pid=3 term=obey
end 9 400 client=c2 how=done
`
	r := check(readers, "9 1\n")
	require.True(t, r.OK(), "two readers together, out of token order, then a writer above both: %v", r)

	r = check(strings.Replace(readers, "start 9 300", "start 9 205", 1), "9 1\n")
	require.Len(t, r.Overlaps, 1, "a writer while a reader is in: %v", r)
	r = check(strings.Replace(readers, "start 4 110 client=c1 pid=2 term=obey mode=shared", "start 4 110 client=c1 pid=2 term=obey", 1), "9 1\n4 2\n")
	require.NotEmpty(t, r.Overlaps, "a reader with a writer: %v", r)
	r = check(strings.Replace(strings.Replace(readers, "start 9 300", "start 3 300", 1), "end 9 400", "end 3 400", 1), "3 1\n")
	require.Len(t, r.OutOfOrder, 1, "a writer below an earlier reader's token: %v", r)
	r = check(readers+"start 8 500 client=c0 pid=4 term=obey mode=shared\nend 8 600 client=c0 how=done\n", "9 1\n")
	require.Len(t, r.OutOfOrder, 1, "a reader below an earlier writer's token: %v", r)
}
