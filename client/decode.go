package client

import "time"

// wireDecision is the decision object of docs/API.md, or an entry's error.
type wireDecision struct {
	Allowed       bool       `json:"allowed"`
	Limit         int64      `json:"limit"`
	Remaining     int64      `json:"remaining"`
	ResetAfterMS  int64      `json:"reset_after_ms"`
	RetryAfterMS  int64      `json:"retry_after_ms"`
	DelayMS       int64      `json:"delay_ms"`
	ShadowRefused bool       `json:"shadow_refused"`
	Replayed      bool       `json:"replayed"`
	Reason        string     `json:"reason"`
	Error         *wireError `json:"error"`
}

type wireError struct {
	Code    string `json:"code"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (w *wireDecision) decision() Decision {
	d := Decision{
		Allowed: w.Allowed, Limit: w.Limit, Remaining: w.Remaining,
		ResetAfter: ms(w.ResetAfterMS), RetryAfter: ms(w.RetryAfterMS), Delay: ms(w.DelayMS),
		ShadowRefused: w.ShadowRefused, Replayed: w.Replayed, Reason: w.Reason,
	}
	if w.RetryAfterMS < 0 {
		d.RetryAfter = Never
	}
	return d
}

func (w *wireError) err(status int) *Error {
	return &Error{Status: status, Code: w.Code, Field: w.Field, Message: w.Message}
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

type wireBatch struct {
	Results []wireDecision `json:"results"`
}

type wireAll struct {
	Allowed  bool           `json:"allowed"`
	Results  []wireDecision `json:"results"`
	Replayed bool           `json:"replayed"`
}
