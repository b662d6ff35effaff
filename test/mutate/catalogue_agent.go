package main

// The agent's rules (docs/protocol.md change 68): each weakened by one here
// is killed by a test of its own package (./agent runs real servers, so only
// the named tests run; see ownTests), or by the bakery's for rule 3's core.
var agentMutants = []Mutant{
	{"held-until-past-the-lapse", "change 68 (3): a holding's instant ends at the lease's, read against the clock, with no Tick", "bakery/session.go",
		"\tif !now.Before(until) {\n\t\treturn time.Time{}\n\t}\n\treturn until", "\treturn until"},
	{"held-until-ignores-max-hold", "change 68 (3), change 24: a holding's instant ends where the max-hold gives it up", "bakery/session.go",
		"until = minTime(until, a.entered.Add(mh-c.maxHoldMargin(mh)))", "until = minTime(until, a.entered.Add(mh))"},
	{"agent-valid-without-instant", "change 68 (3): valid comes from the guarantee's instant, not from no loss said yet", "agent/holds.go",
		"if until := h.g.ValidUntil(); !until.IsZero() && (h.expires.IsZero() || now.Before(h.expires)) {",
		"if until := h.g.ValidUntil(); h.g.Err() == nil && (h.expires.IsZero() || now.Before(h.expires)) {"},
	{"agent-valid-past-ttl", "change 68 (3): a hold is not valid past its ttl", "agent/holds.go",
		"if until := h.g.ValidUntil(); !until.IsZero() && (h.expires.IsZero() || now.Before(h.expires)) {",
		"if until := h.g.ValidUntil(); !until.IsZero() {"},
	{"agent-loss-hidden-until-noted", "change 68 (3): a loss shows at once, before the agent notes it", "agent/holds.go",
		"if err := h.g.Err(); v.State == stateHeld && err != nil {", "if err := h.g.Err(); v.State == stateHeld && err != nil && false {"},
	{"agent-lost-released-at-once", "change 68 (4), change 34: a lost hold is released once its caller stops, or the grace later", "agent/holds.go",
		"\t\th.finish(stateLost, lostReason(err), err.Error(), time.Now())\n\t\twaitRelease()", "\t\th.finish(stateLost, lostReason(err), err.Error(), time.Now())"},
	{"agent-stream-close-keeps-hold", "change 68 (4): closing a hold stream releases its hold", "agent/http_locks.go",
		"\t\tcase <-ctx.Done():\n\t\t\th.askRelease()\n\t\t\treturn\n\t\t}\n\t}\n}", "\t\tcase <-ctx.Done():\n\t\t\treturn\n\t\t}\n\t}\n}"},
	{"agent-request-id-ignored", "change 68 (5): an acquire with a request_id returns the hold it took to a retry", "agent/acquire.go",
		"\tif p.requestID != \"\" {\n\t\treturn a.acquireOnce(ctx, p)", "\tif false {\n\t\treturn a.acquireOnce(ctx, p)"},
	{"agent-retry-params-unchecked", "change 68 (5): a retry must ask what its request_id asked", "agent/requests.go",
		"case at != nil && !at.p.same(p):", "case at != nil && false:"},
	{"agent-unclaimed-hold-kept", "change 68 (5): a hold nobody claims within the claim window is released", "agent/requests.go",
		"\t\t\t\tat.hold.askRelease()\n", "\n"},
	{"agent-lock-id-short", "change 68 (1): a lock_id is 128 random bits", "agent/holds.go",
		"\tvar b [16]byte\n", "\tvar b [4]byte\n"},
	{"agent-token-unchecked", "change 68 (6): a TCP agent wants its bearer token", "agent/agent.go",
		"if token != nil && !authorized(r, token) {", "if false && token != nil && !authorized(r, token) {"},
	{"agent-streams-unbounded", "change 68 (6): streams and long polls are bounded", "agent/agent.go",
		"if a.streams.Add(1) > int64(a.cfg.MaxStreams) {", "if a.streams.Add(1) > int64(a.cfg.MaxStreams)+1 {"},
	{"agent-ping-interval-only", "change 68 (3), (4): a hold stream pings each time its valid_until moves on", "agent/http_locks.go",
		"moved := lastUntil == nil || v.ValidUntil.After(*lastUntil)", "moved := lastUntil == nil && false"},
	{"agent-holds-unbounded", "change 68 (6): holds and attempts are bounded", "agent/holds.go",
		"\tif t.live >= t.max {", "\tif t.live > t.max {"},
}

func init() {
	Catalogue = append(Catalogue, agentMutants...)
	for name, tests := range map[string]string{
		"agent-valid-without-instant":   "^TestValidIsTheGuaranteesInstant$",
		"agent-valid-past-ttl":          "^TestValidIsTheGuaranteesInstant$",
		"agent-loss-hidden-until-noted": "^TestALossShowsAtOnceWithItsReason$",
		"agent-lost-released-at-once":   "^TestALostHoldIsReleasedAfterItsCallerStopsOrTheGrace$",
		"agent-stream-close-keeps-hold": "^TestClosingAHoldStreamReleasesTheLock$",
		"agent-request-id-ignored":      "^TestARetriedAcquireReturnsTheSameHold$",
		"agent-retry-params-unchecked":  "^TestARetriedAcquireReturnsTheSameHold$",
		"agent-unclaimed-hold-kept":     "^TestAnUnclaimedHoldIsReleased$",
		"agent-lock-id-short":           "^TestAcquireReleaseTokensGrow$",
		"agent-token-unchecked":         "^TestTheTokenIsRequired$",
		"agent-streams-unbounded":       "^TestBoundsRefuseWithTooManyRequests$",
		"agent-holds-unbounded":         "^TestHoldTableBounds$",
		"agent-ping-interval-only":      "^TestAHoldStreamPingsEachRenewal$",
	} {
		ownTests[name] = tests
	}
}
