package nodeapi

import "time"

// Usage history (fsm/history.go): what a key used and was refused per
// window of a limit, kept with the key for the limit's "history" option,
// and the export of one closed window for billing.

// Bounds on usage history, defined once here.
const (
	// MaxHistory bounds a limit's history option (algo.MaxWindow; the
	// windows it may keep: algo.ValidateHistory).
	MaxHistory = 3650 * 24 * time.Hour
	// MaxUsageWindows bounds the windows one usage read returns.
	MaxUsageWindows = 1000
)

// UsageQuery is one key's usage of one limit (GET /v1/usage): the policy,
// or the plan limit of the key's plan at the read's index (Limit may be
// empty when the plan has one). Windows starting in [From, To) are
// returned (Unix ns; To 0: no bound), at most Limit of them, the latest.
type UsageQuery struct {
	Key    string
	Policy string
	Limit  string
	From   int64
	To     int64
	Max    int
}

// UsageWindow is one window of a key's usage: Used is the allowed cost
// counted in it, Refused the refusals decided through the log in it.
type UsageWindow struct {
	Start, End int64 // Unix ns
	Used       int64
	Refused    int64
	Current    bool // the window holding the read's leader time
}

// KeyUsageHistory answers a UsageQuery: Windows oldest first.
type KeyUsageHistory struct {
	Key          string
	Policy       string // the policy, or
	Plan         string // the plan and its limit
	Limit        string
	History      time.Duration
	Windows      []UsageWindow
	AppliedIndex uint64
}

// ExportQuery names one window of a policy or plan limit to export: every
// key's usage in the window holding Window (Unix ns), which must be closed
// at the read's leader time.
type ExportQuery struct {
	Policy    string
	Plan      string
	PlanLimit string
	Window    int64
}

// ExportRow is one key's usage in an exported window.
type ExportRow struct {
	Key     string
	Used    int64
	Refused int64
}

// ExportHeader is what an export reports before its rows.
type ExportHeader struct {
	Start, End   int64
	AppliedIndex uint64
}

// Top keys (fsm/topkeys.go): per policy, the keys with the most allowed
// cost or refusals over the last 5 minutes or hour, from a bounded sketch
// in each node's memory, updated in apply.
const (
	TopByAllowed = "allowed"
	TopByRefused = "refused"
	// MaxTopKeys bounds the keys one answer lists (the sketch's size).
	MaxTopKeys = 32
)

// TopKeysQuery names one top-keys view: Window is 5 minutes or an hour.
// It names a policy, or a plan (the checks its keys' plan decided) and
// optionally one of its limits (PlanLimit: which limit refused).
type TopKeysQuery struct {
	Policy          string
	Plan, PlanLimit string
	Window          time.Duration
	By              string
	Limit           int
}

// TopKey is one key's count in the window: at least Count-Error, at most
// Count (the sketch over-estimates a key it admitted late by Error).
type TopKey struct {
	Key          string
	Count, Error int64
}

// TopKeys answers a TopKeysQuery: Keys greatest first, at the node's last
// applied leader time Now.
type TopKeys struct {
	Policy          string
	Plan, PlanLimit string
	Window          time.Duration
	By              string
	Now             int64
	Keys            []TopKey
}
