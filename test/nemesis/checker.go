package nemesis

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The fenced shared resource is two files on the host's filesystem, which
// every network namespace shares:
//
//   - the history: one record a line, appended with O_APPEND (one write a
//     record) by the commands that run under the lock and by the harness;
//   - the counter: an append-only log of increments, one line "TOKEN VALUE"
//     a write. A command reads the last VALUE, sleeps, and appends VALUE+1:
//     a read-modify-write that two overlapping holders spoil. A reader (a
//     command under a shared holding, docs/protocol.md change 60) reads
//     only: readers may overlap readers, never a writer.
//
// A history line is "KIND TOKEN NS key=value...", NS a CLOCK_MONOTONIC
// reading in nanoseconds (one clock for every namespace: intervals of
// different processes compare), TOKEN the holder's BQ_LOCK_TOKEN_INT or "-":
//
//	start TOKEN NS client=C pid=P term=obey|ignore [mode=shared]   the command starts (before it reads)
//	end   TOKEN NS client=C how=done|term            its last write is behind it
//	dead  TOKEN NS client=C                          the harness saw it die (its socket closed)
//	exit  -     NS client=C code=N                   the harness reaped that client's bqclient
//	note  -     NS free text                         what the nemesis did (ignored)

// Record is one line of a history.
type Record struct {
	Line   int    // 1-based
	Kind   string // start, end, dead, exit, note
	Token  string // decimal, "" for "-"
	NS     int64
	Client string
	Attrs  map[string]string // the other key=value fields; a note's text is "text"
}

// FormatRecord is the line of a record, without the newline.
func FormatRecord(kind, token string, ns int64, attrs ...string) string {
	if token == "" {
		token = "-"
	}
	return strings.Join(append([]string{kind, token, strconv.FormatInt(ns, 10)}, attrs...), " ")
}

// ParseHistory reads a history.
func ParseHistory(r io.Reader) ([]Record, error) {
	var recs []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("history line %d: %q: want KIND TOKEN NS ...", n, line)
		}
		rec := Record{Line: n, Kind: f[0], Attrs: map[string]string{}}
		if f[1] != "-" {
			if _, ok := new(big.Int).SetString(f[1], 10); !ok {
				return nil, fmt.Errorf("history line %d: token %q is not a decimal integer", n, f[1])
			}
			rec.Token = f[1]
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("history line %d: time %q: %v", n, f[2], err)
		}
		rec.NS = ns
		if rec.Kind == "note" {
			rec.Attrs["text"] = strings.Join(f[3:], " ")
		} else {
			for _, kv := range f[3:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("history line %d: %q is not key=value", n, kv)
				}
				rec.Attrs[k] = v
			}
			rec.Client = rec.Attrs["client"]
		}
		switch rec.Kind {
		case "start", "end", "dead":
			if rec.Token == "" || rec.Client == "" {
				return nil, fmt.Errorf("history line %d: %s needs a token and client=", n, rec.Kind)
			}
		case "exit":
			if rec.Client == "" {
				return nil, fmt.Errorf("history line %d: exit needs client=", n)
			}
		case "note":
		default:
			return nil, fmt.Errorf("history line %d: unknown kind %q", n, rec.Kind)
		}
		recs = append(recs, rec)
	}
	return recs, sc.Err()
}

// Write is one line of the counter log.
type Write struct {
	Line  int
	Token string
	Value int
}

// ParseCounter reads a counter log.
func ParseCounter(r io.Reader) ([]Write, error) {
	var ws []Write
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("counter line %d: %q: want TOKEN VALUE", n, line)
		}
		v, err := strconv.Atoi(f[1])
		if err != nil {
			return nil, fmt.Errorf("counter line %d: %v", n, err)
		}
		ws = append(ws, Write{Line: n, Token: f[0], Value: v})
	}
	return ws, sc.Err()
}

// Never is the close of a command nothing shows the end of.
const Never = int64(math.MaxInt64)

// Command is one run of a command under the lock: from its start record to
// the moment it can no longer touch the resource (Close).
type Command struct {
	Client, Token, Term string
	Shared              bool // a reader's: it overlaps readers (change 60)
	StartLine           int
	Start, Close        int64
	// ClosedBy says what closed it: "end" (its own last record), "dead" (the
	// harness saw it die without an end: killed), "next" (neither: open
	// until the next record of its client), or "never".
	ClosedBy string
	How      string // the end record's how=, if any
}

func (c Command) String() string {
	cl := "never"
	if c.Close != Never {
		cl = strconv.FormatInt(c.Close, 10)
	}
	return fmt.Sprintf("%s token %s (line %d, term=%s) [%d, %s by %s]", c.Client, c.Token, c.StartLine, c.Term, c.Start, cl, c.ClosedBy)
}

// Overlap is a command that started while another was open.
type Overlap struct {
	Earlier, Later Command
}

// By is how long the earlier stayed open after the later started (or -1:
// the earlier never closed).
func (o Overlap) By() time.Duration {
	if o.Earlier.Close == Never {
		return -1
	}
	return time.Duration(o.Earlier.Close - o.Later.Start)
}

func (o Overlap) String() string {
	by := "; the earlier never closed"
	if d := o.By(); d >= 0 {
		by = fmt.Sprintf(", which closed %v later", d)
	}
	return fmt.Sprintf("overlap: %v started while %v was open%s", o.Later, o.Earlier, by)
}

// Report is what Check found.
type Report struct {
	Commands   []Command // by start time
	Overlaps   []Overlap
	OutOfOrder []Overlap // Later started with a token not above Earlier's (the highest before it)
	// The counter: Increments writes, the last one Final; a write whose value
	// is not the one before it plus one read a stale value (a lost update).
	Increments, Final int
	StaleWrites       []Write
	Problems          []string // a malformed history: a record that fits no command
}

// LostUpdates is how many increments the counter lost.
func (r Report) LostUpdates() int { return r.Increments - r.Final }

// OK says whether the history is free of every fault.
func (r Report) OK() bool {
	return len(r.Overlaps) == 0 && len(r.OutOfOrder) == 0 && r.Final == r.Increments && len(r.StaleWrites) == 0 && len(r.Problems) == 0
}

// String lists every fault, one a line.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d commands, %d increments, counter %d", len(r.Commands), r.Increments, r.Final)
	for _, o := range r.Overlaps {
		fmt.Fprintf(&b, "\n%v", o)
	}
	for _, o := range r.OutOfOrder {
		fmt.Fprintf(&b, "\ntoken out of order: %v started after %v", o.Later, o.Earlier)
	}
	if r.Final != r.Increments {
		fmt.Fprintf(&b, "\nlost updates: the counter is %d after %d increments", r.Final, r.Increments)
	}
	for _, w := range r.StaleWrites {
		fmt.Fprintf(&b, "\nstale write: counter line %d, token %s wrote %d", w.Line, w.Token, w.Value)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "\nmalformed history: %s", p)
	}
	return b.String()
}

// Check is the checker: a pure function of a history and a counter log.
//
//   - Overlap: a command starts while another is open, unless both are
//     readers' (change 60). A command is open from
//     its start record to its end record; one killed before it wrote its end
//     is open until the harness saw it die, and one with neither until the
//     next record of its client (its bqclient's exit, its next start), or for
//     ever.
//   - Token out of order: a writer's start whose token is not above every
//     earlier start's (earlier by start time), or a reader's not above every
//     earlier writer's.
//   - Lost update: the counter's last value is not the number of increments,
//     or an increment did not write the value before it plus one.
func Check(hist []Record, writes []Write) Report {
	var r Report
	var cmds []*Command
	open := map[string]*Command{} // client+" "+token → its latest command
	byClient := map[string][]*Command{}
	for _, rec := range hist {
		key := rec.Client + " " + rec.Token
		switch rec.Kind {
		case "start":
			c := &Command{Client: rec.Client, Token: rec.Token, Term: rec.Attrs["term"], Shared: rec.Attrs["mode"] == "shared",
				StartLine: rec.Line, Start: rec.NS, Close: Never, ClosedBy: "never"}
			cmds = append(cmds, c)
			open[key] = c
			// A start closes the client's earlier commands that nothing closed.
			closeNext(byClient[rec.Client], rec.NS)
			byClient[rec.Client] = append(byClient[rec.Client], c)
		case "end":
			c := open[key]
			if c == nil || c.ClosedBy == "end" {
				r.Problems = append(r.Problems, fmt.Sprintf("line %d: end of %s token %s, which did not start", rec.Line, rec.Client, rec.Token))
				continue
			}
			c.Close, c.ClosedBy, c.How = rec.NS, "end", rec.Attrs["how"]
		case "dead":
			c := open[key]
			if c == nil {
				r.Problems = append(r.Problems, fmt.Sprintf("line %d: death of %s token %s, which did not start", rec.Line, rec.Client, rec.Token))
				continue
			}
			if c.ClosedBy != "end" {
				c.Close, c.ClosedBy = rec.NS, "dead"
			}
		case "exit":
			closeNext(byClient[rec.Client], rec.NS)
		}
	}
	sort.SliceStable(cmds, func(i, j int) bool { return cmds[i].Start < cmds[j].Start })
	for _, c := range cmds {
		if c.Close < c.Start {
			r.Problems = append(r.Problems, fmt.Sprintf("%v closed before it started", c))
		}
	}

	// Overlaps: sweep in start order, keeping the commands still open.
	var active []*Command
	for _, c := range cmds {
		kept := active[:0]
		for _, a := range active {
			if a.Close > c.Start {
				kept = append(kept, a)
				if !a.Shared || !c.Shared {
					r.Overlaps = append(r.Overlaps, Overlap{Earlier: *a, Later: *c})
				}
			}
		}
		active = append(kept, c)
	}

	// Tokens: a writer's start above every earlier start's, a reader's
	// above every earlier writer's.
	var top, topWriter *Command
	var topTok, topWriterTok *big.Int
	for _, c := range cmds {
		tok, _ := new(big.Int).SetString(c.Token, 10)
		switch {
		case !c.Shared && top != nil && tok.Cmp(topTok) <= 0:
			r.OutOfOrder = append(r.OutOfOrder, Overlap{Earlier: *top, Later: *c})
			continue
		case c.Shared && topWriter != nil && tok.Cmp(topWriterTok) <= 0:
			r.OutOfOrder = append(r.OutOfOrder, Overlap{Earlier: *topWriter, Later: *c})
			continue
		}
		if top == nil || tok.Cmp(topTok) > 0 {
			top, topTok = c, tok
		}
		if !c.Shared {
			topWriter, topWriterTok = c, tok
		}
	}

	// The counter.
	r.Increments = len(writes)
	prev := 0
	for _, w := range writes {
		if w.Value != prev+1 {
			r.StaleWrites = append(r.StaleWrites, w)
		}
		prev = w.Value
	}
	if len(writes) > 0 {
		r.Final = writes[len(writes)-1].Value
	}
	starters := map[string]bool{}
	for _, c := range cmds {
		starters[c.Token] = true
	}
	for _, w := range writes {
		if !starters[w.Token] {
			r.Problems = append(r.Problems, fmt.Sprintf("counter line %d: written by token %s, which never started", w.Line, w.Token))
		}
	}

	for _, c := range cmds {
		r.Commands = append(r.Commands, *c)
	}
	return r
}

// closeNext closes, at ns, a client's commands that nothing closed yet.
func closeNext(cs []*Command, ns int64) {
	for _, c := range cs {
		if c.ClosedBy == "never" {
			c.Close, c.ClosedBy = ns, "next"
		}
	}
}
