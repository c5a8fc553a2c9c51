package overlimit

import "github.com/limitd/limitd/algo"

// Cacheable reports whether an applied decision may become a cache entry: a
// refusal, under a limit that is not in shadow mode, whose refusals do not
// change state, with a finite positive retry time.
//
//   - Shadow mode answers "allowed" whatever algo decided: the cache must not
//     refuse what the state machine allows.
//   - count_refused sliding logs log refused requests too, so each refusal
//     pushes the retry time further: answering one from memory would skip that
//     write and let the key through earlier than the state machine would.
//   - RetryAfter == algo.Never (a cost above the limit or burst) is not
//     cached: it depends only on the spec, so the check path can answer it
//     without any state, and an entry that never expires would only take
//     space from the refusals the cache is for.
//
// d is algo's decision, before shadow mode turned a refusal into an allowance.
func Cacheable(spec *algo.Spec, shadow bool, d algo.Decision) bool {
	return !d.Allowed && !shadow && !spec.CountRefused && d.RetryAfter > 0
}

// effectiveCost is the cost a check is decided for: algo decides a peek
// (cost 0) as a request of cost 1, so a peek is refused exactly when a cost-1
// request is.
func effectiveCost(cost int64) int64 {
	if cost == 0 {
		return 1
	}
	return cost
}
