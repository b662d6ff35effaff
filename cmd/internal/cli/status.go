package cli

import (
	"fmt"
	"io"

	"github.com/bq-lock/bq"
)

// A cluster's status as the commands print it (bqclient status, bqserver
// status): text for people, JSON for programs.

// PrintStatus writes st for people.
func PrintStatus(w io.Writer, st *bq.Status) {
	if st.Epoch > 0 {
		fmt.Fprintf(w, "epoch %d; ", st.Epoch)
	}
	fmt.Fprintf(w, "servers: %d of %d reachable (quorum %d)", st.Reachable, st.N, st.Quorum)
	switch {
	case st.FaultsTolerated < 0:
		fmt.Fprintf(w, "; CANNOT SERVE LOCKS: need %d more\n", -st.FaultsTolerated)
	default:
		fmt.Fprintf(w, "; tolerates %d more faulty server(s) now (f=%d)\n", st.FaultsTolerated, st.F)
	}
	for _, s := range st.Servers {
		state := "up"
		if !s.Reachable {
			state = "UNREACHABLE"
		}
		fmt.Fprintf(w, "  %-4s %-22s %s\n", s.ID, s.Address, state)
	}
	if st.Lock == nil {
		if len(st.Locks) == 0 {
			fmt.Fprintln(w, "locks: none in use")
		}
		for _, l := range st.Locks {
			fmt.Fprintf(w, "lock %s: %d member(s)\n", l.Name, l.Members)
		}
		if st.LocksTruncated {
			fmt.Fprintln(w, "(the list is cut at a server's reply limit: some locks are missing; name a lock to see it)")
		}
		return
	}
	// One model (bq.LockStatus): the holders, each with its mode and
	// token, then the queue in the order it will enter, each with its mode
	// and where it is; both headings always.
	l := st.Lock
	fmt.Fprintf(w, "lock %s\n", l.Name)
	if len(l.Holders) == 0 {
		fmt.Fprintln(w, "  holders: none")
	} else {
		fmt.Fprintf(w, "  holders: %d\n", len(l.Holders))
	}
	for _, p := range l.Holders {
		fmt.Fprintf(w, "      %s %s, token=%s (reported by %d)\n", who(p), p.Mode, p.Token(), p.ReportedBy)
	}
	if len(l.Queue) == 0 {
		fmt.Fprintln(w, "  queue: empty")
	} else {
		fmt.Fprintf(w, "  queue: %d, in the order they will enter\n", len(l.Queue))
	}
	for i, p := range l.Queue {
		where := p.State()
		if p.Ticket > 0 {
			where += fmt.Sprintf(", ticket %d", p.Ticket)
		}
		fmt.Fprintf(w, "  %3d. %s %s, %s (reported by %d)\n", i+1, who(p), p.Mode, where, p.ReportedBy)
	}
	for _, s := range l.Suspected {
		fmt.Fprintf(w, "  suspected: %s (by %d server(s))\n", s.Client.Hex()[:16], s.ReportedBy)
	}
	for _, b := range l.Banned {
		fmt.Fprintf(w, "  banned: %s (by %d server(s))\n", b.Client.Hex()[:16], b.ReportedBy)
	}
}

// who names a participant: its enrolled name and short id on a closed
// cluster, its short id alone otherwise.
func who(p bq.Participant) string {
	if p.Name != "" {
		return fmt.Sprintf("%s (%s)", p.Name, p.Client.Hex()[:16])
	}
	return p.Client.Hex()[:16]
}

type jsonParticipant struct {
	Client string `json:"client"`
	Name   string `json:"name,omitempty"`
	// State is where it is: "holding", "waiting", "choosing a ticket"
	// (bq.Participant.State); Phase is the protocol's word for it.
	State      string `json:"state"`
	Phase      string `json:"phase"`
	Mode       string `json:"mode"`
	Ticket     uint64 `json:"ticket,omitempty"`
	Token      string `json:"token,omitempty"`
	TokenInt   string `json:"token_int,omitempty"`
	ReportedBy int    `json:"reported_by"`
}

type jsonFlagged struct {
	Client     string `json:"client"`
	ReportedBy int    `json:"reported_by"`
}

type jsonServer struct {
	ID        int    `json:"id"`
	Address   string `json:"address"`
	Reachable bool   `json:"reachable"`
}

type jsonLock struct {
	Name string `json:"name"`
	// Holder is the first of Holders, for readers written for exclusive
	// locks; Queue holds no holder (before issue 55 it held every holder
	// but the first).
	Holder    *jsonParticipant  `json:"holder"`
	Holders   []jsonParticipant `json:"holders"`
	Queue     []jsonParticipant `json:"queue"`
	Suspected []jsonFlagged     `json:"suspected"`
	Banned    []jsonFlagged     `json:"banned"`
}

// JSONStatus is a Status in the commands' JSON.
type JSONStatus struct {
	Epoch           uint64           `json:"epoch"`
	N               int              `json:"n"`
	F               int              `json:"f"`
	Quorum          int              `json:"quorum"`
	Reachable       int              `json:"reachable"`
	FaultsTolerated int              `json:"faults_tolerated"`
	Servers         []jsonServer     `json:"servers"`
	Lock            *jsonLock        `json:"lock,omitempty"`
	Locks           []map[string]any `json:"locks,omitempty"`
	LocksTruncated  bool             `json:"locks_truncated,omitempty"`
}

func participantJSON(p bq.Participant) jsonParticipant {
	jp := jsonParticipant{Client: p.Client.Hex(), Name: p.Name, State: p.State(), Phase: p.Phase.String(), Mode: p.Mode.String(), Ticket: p.Ticket, ReportedBy: p.ReportedBy}
	if p.Ticket > 0 {
		jp.Token = p.Token().String()
		jp.TokenInt = p.Token().Integer()
	}
	return jp
}

// StatusJSON is st for programs.
func StatusJSON(st *bq.Status) JSONStatus {
	out := JSONStatus{Epoch: st.Epoch, N: st.N, F: st.F, Quorum: st.Quorum, Reachable: st.Reachable, FaultsTolerated: st.FaultsTolerated, LocksTruncated: st.LocksTruncated}
	for _, s := range st.Servers {
		out.Servers = append(out.Servers, jsonServer{ID: int(s.ID), Address: s.Address, Reachable: s.Reachable})
	}
	for _, l := range st.Locks {
		out.Locks = append(out.Locks, map[string]any{"name": l.Name, "members": l.Members})
	}
	if l := st.Lock; l != nil {
		jl := &jsonLock{Name: l.Name, Holders: []jsonParticipant{}, Queue: []jsonParticipant{}, Suspected: []jsonFlagged{}, Banned: []jsonFlagged{}}
		for _, p := range l.Holders {
			jl.Holders = append(jl.Holders, participantJSON(p))
		}
		if l.Holder != nil {
			p := participantJSON(*l.Holder)
			jl.Holder = &p
		}
		for _, p := range l.Queue {
			jl.Queue = append(jl.Queue, participantJSON(p))
		}
		for _, f := range l.Suspected {
			jl.Suspected = append(jl.Suspected, jsonFlagged{Client: f.Client.Hex(), ReportedBy: f.ReportedBy})
		}
		for _, f := range l.Banned {
			jl.Banned = append(jl.Banned, jsonFlagged{Client: f.Client.Hex(), ReportedBy: f.ReportedBy})
		}
		out.Lock = jl
	}
	return out
}
