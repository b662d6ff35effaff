package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Dapr's distributed lock API (v1.0-alpha1), so that a program written
// against Dapr's lock building block uses bq unchanged: TryLock with an
// owner and an expiry, Unlock by resource and owner. Dapr's model is
// weaker than the agent's own: the owner is a string its caller chose (who
// knows it can unlock), there is no blocking lock, no renewal and no
// fencing token (the answer carries the token as an extra field, which Dapr
// clients ignore). Any store name is accepted: the agent's cluster is the
// store.

// daprLockRequest is Dapr's TryLockRequest.
type daprLockRequest struct {
	ResourceID      string `json:"resourceId"`
	LockOwner       string `json:"lockOwner"`
	ExpiryInSeconds int    `json:"expiryInSeconds"`
}

// daprUnlockRequest is Dapr's UnlockRequest.
type daprUnlockRequest struct {
	ResourceID string `json:"resourceId"`
	LockOwner  string `json:"lockOwner"`
}

// Dapr's UnlockResponse statuses.
const (
	daprUnlocked       = 0
	daprNotExist       = 1
	daprBelongsToOther = 2
	daprInternalError  = 3
)

// daprLocks are the holds taken through the Dapr API, by resource.
// INVARIANT: an entry's hold was taken for its owner; entries whose hold
// ended are dropped when next looked at, and all of them once there are
// MaxHolds entries, so there are never more than MaxHolds + 1.
type daprLocks struct {
	mu    sync.Mutex
	byRes map[string]daprLock
}

type daprLock struct {
	owner string
	h     *hold
}

// handleDaprLock is POST /v1.0-alpha1/lock/{store}: try to take the
// resource for the owner, held for expiryInSeconds.
func (a *Agent) handleDaprLock(w http.ResponseWriter, r *http.Request) {
	var req daprLockRequest
	if e := decodeBody(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	switch {
	case req.ResourceID == "":
		writeError(w, badField("resourceId", "resourceId: the lock's name, required"))
		return
	case req.LockOwner == "":
		writeError(w, badField("lockOwner", "lockOwner: required (Dapr's owner of the lock)"))
		return
	case req.ExpiryInSeconds <= 0:
		writeError(w, badField("expiryInSeconds", "expiryInSeconds: required, at least 1"))
		return
	case len(req.LockOwner) > maxRequestID:
		writeError(w, badField("lockOwner", fmt.Sprintf("lockOwner: at most %d bytes", maxRequestID)))
		return
	}
	p, e := a.parseAcquire(req.ResourceID, acquireRequest{Try: true})
	if e != nil {
		e.Field = map[string]string{"name": "resourceId"}[e.Field]
		writeError(w, e)
		return
	}
	p.ttl = time.Duration(req.ExpiryInSeconds) * time.Second
	if mh := a.c.MaxHold(); mh > 0 && p.ttl > mh {
		writeError(w, badField("expiryInSeconds", fmt.Sprintf("expiryInSeconds: %v is longer than this identity's max-hold, %v", p.ttl, mh)))
		return
	}
	d := &a.dapr
	d.mu.Lock()
	if l, ok := d.byRes[req.ResourceID]; ok && l.h.view(time.Now()).State == stateHeld {
		d.mu.Unlock()
		_ = writeJSON(w, http.StatusOK, map[string]any{"success": false})
		return
	}
	d.mu.Unlock()
	h, e := a.acquire(r.Context(), p)
	if e != nil {
		if e.Code == CodeBusy {
			_ = writeJSON(w, http.StatusOK, map[string]any{"success": false})
			return
		}
		writeError(w, e)
		return
	}
	d.mu.Lock()
	if len(d.byRes) >= a.cfg.MaxHolds { // forget those that ended: the live ones are fewer
		for res, l := range d.byRes {
			if l.h.view(time.Now()).State != stateHeld {
				delete(d.byRes, res)
			}
		}
	}
	d.byRes[req.ResourceID] = daprLock{owner: req.LockOwner, h: h}
	d.mu.Unlock()
	t := h.g.Token()
	_ = writeJSON(w, http.StatusOK, map[string]any{"success": true, "token": t.String(), "token_int": t.Integer()})
}

// handleDaprUnlock is POST /v1.0-alpha1/unlock/{store}: release the
// resource if the owner holds it.
func (a *Agent) handleDaprUnlock(w http.ResponseWriter, r *http.Request) {
	var req daprUnlockRequest
	if e := decodeBody(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.ResourceID == "" || req.LockOwner == "" {
		writeError(w, badField(map[bool]string{true: "resourceId", false: "lockOwner"}[req.ResourceID == ""], "resourceId and lockOwner are required"))
		return
	}
	d := &a.dapr
	d.mu.Lock()
	l, ok := d.byRes[req.ResourceID]
	if ok && l.h.view(time.Now()).State != stateHeld {
		delete(d.byRes, req.ResourceID)
		ok = false
	}
	switch {
	case !ok:
		d.mu.Unlock()
		_ = writeJSON(w, http.StatusOK, map[string]any{"status": daprNotExist})
		return
	case l.owner != req.LockOwner:
		d.mu.Unlock()
		_ = writeJSON(w, http.StatusOK, map[string]any{"status": daprBelongsToOther})
		return
	}
	delete(d.byRes, req.ResourceID)
	d.mu.Unlock()
	l.h.askRelease()
	ctx, cancel := context.WithTimeout(r.Context(), unlockBudget)
	defer cancel()
	select {
	case <-l.h.gone:
		_ = writeJSON(w, http.StatusOK, map[string]any{"status": daprUnlocked})
	case <-ctx.Done():
		status := daprInternalError
		if errors.Is(ctx.Err(), context.Canceled) {
			return // the caller left
		}
		_ = writeJSON(w, http.StatusOK, map[string]any{"status": status})
	}
}
