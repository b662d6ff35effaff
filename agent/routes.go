package agent

import (
	_ "embed"
	"net/http"
	"sort"
	"strings"
)

// OpenAPI is the API's OpenAPI 3 document, served at /v1/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// route is one path of the API and its handlers by method.
type route struct {
	pattern string
	methods map[string]http.HandlerFunc
}

// Routes are the API's paths and methods, for the OpenAPI check.
func (a *Agent) Routes() map[string][]string {
	out := make(map[string][]string)
	for _, rt := range a.routeList() {
		for m := range rt.methods {
			out[rt.pattern] = append(out[rt.pattern], m)
		}
		sort.Strings(out[rt.pattern])
	}
	return out
}

func (a *Agent) routeList() []route {
	return []route{
		{"/v1/locks/{name}", map[string]http.HandlerFunc{http.MethodGet: a.handleStatus}},
		{"/v1/locks/{name}/acquire", map[string]http.HandlerFunc{http.MethodPost: a.handleAcquire}},
		{"/v1/locks/{name}/hold", map[string]http.HandlerFunc{http.MethodPost: a.handleHold}},
		{"/v1/holds/{lock_id}", map[string]http.HandlerFunc{http.MethodGet: a.handleGetHold, http.MethodDelete: a.handleRelease}},
		{"/v1/holds/{lock_id}/wait", map[string]http.HandlerFunc{http.MethodGet: a.handleWaitHold}},
		{"/v1/elections/{name}/campaign", map[string]http.HandlerFunc{http.MethodPost: a.handleCampaign}},
		{"/v1/elections/{name}/proclaim", map[string]http.HandlerFunc{http.MethodPost: a.handleProclaim}},
		{"/v1/elections/{name}/resign", map[string]http.HandlerFunc{http.MethodPost: a.handleResign}},
		{"/v1/elections/{name}/leader", map[string]http.HandlerFunc{http.MethodGet: a.handleLeader}},
		{"/v1/elections/{name}/observe", map[string]http.HandlerFunc{http.MethodGet: a.handleObserve}},
		{"/v1/health", map[string]http.HandlerFunc{http.MethodGet: a.handleHealth}},
		{"/v1/openapi.yaml", map[string]http.HandlerFunc{http.MethodGet: handleOpenAPI}},
		{"/v1.0-alpha1/lock/{store}", map[string]http.HandlerFunc{http.MethodPost: a.handleDaprLock}},
		{"/v1.0-alpha1/unlock/{store}", map[string]http.HandlerFunc{http.MethodPost: a.handleDaprUnlock}},
	}
}

// routes builds the mux. Patterns carry no method, so that a wrong method
// and an unknown path get the API's JSON errors, not the mux's text.
func (a *Agent) routes() {
	a.mux = http.NewServeMux()
	for _, rt := range a.routeList() {
		methods := rt.methods
		a.mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			h := methods[r.Method]
			if h == nil {
				allow := make([]string, 0, len(methods))
				for m := range methods {
					allow = append(allow, m)
				}
				sort.Strings(allow)
				w.Header().Set("Allow", strings.Join(allow, ", "))
				_ = writeJSON(w, http.StatusMethodNotAllowed, struct {
					Error *Error `json:"error"`
				}{&Error{Code: CodeBadRequest, Message: r.Method + " " + rt.pattern + ": use " + strings.Join(allow, " or ")}})
				return
			}
			h(w, r)
		})
	}
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &Error{Code: CodeNotFound, Message: "no such path: " + r.URL.Path + " (the API is under /v1; see /v1/openapi.yaml)"})
	})
}

func handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(OpenAPI)
}

// HealthView is the agent's health and its view of the cluster.
type HealthView struct {
	// Status is "ok" when the agent reaches a quorum of its epoch's
	// servers, "unavailable" when not (the answer is then 503).
	Status   string `json:"status"`
	ClientID string `json:"client_id"`
	Cluster  string `json:"cluster"`
	Epoch    uint64 `json:"epoch"`
	// Servers: N, F and Quorum of the epoch; Reachable, how many the agent
	// is connected to now.
	Servers ServersView `json:"servers"`
	Holds   int         `json:"holds"`
	Streams int64       `json:"streams"`
	// MaxHold is the identity's max-hold in seconds (0: none).
	MaxHold float64 `json:"max_hold"`
}

// handleHealth is GET /v1/health.
func (a *Agent) handleHealth(w http.ResponseWriter, _ *http.Request) {
	re := a.c.Reach()
	v := HealthView{
		Status: "ok", ClientID: a.c.ID().Hex(), Cluster: a.c.Cluster().Name, Epoch: re.Epoch,
		Servers: ServersView{N: re.N, F: re.F, Quorum: re.Quorum, Reachable: re.Connected},
		Holds:   a.holds.counts(), Streams: a.streams.Load(), MaxHold: a.c.MaxHold().Seconds(),
	}
	code := http.StatusOK
	if re.Connected < re.Quorum {
		v.Status, code = "unavailable", http.StatusServiceUnavailable
	}
	if a.stopped() {
		v.Status, code = "stopping", http.StatusServiceUnavailable
	}
	_ = writeJSON(w, code, v)
}
