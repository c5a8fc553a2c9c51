package rls_test

import (
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/rls"
	"github.com/limitd/limitd/rls/rlstest"
)

// memStore decides plans in memory with algo.Decide, with the state
// machine's semantics: an All group writes only if every check allows, and
// checks of one group see each other's spend.
type memStore struct {
	state map[string][]byte
}

func (m *memStore) decide(p *rls.Plan, now int64) []rls.Result {
	res := make([]rls.Result, len(p.Items))
	for _, g := range p.Groups {
		tent := map[string][]byte{}
		allOK := true
		for _, i := range g.Items {
			it := &p.Items[i]
			key := it.Key + "\x00" + string(algo.AppendSpec(nil, it.Spec))
			st, ok := tent[key]
			if !ok {
				st = m.state[key]
			}
			cost := it.Cost
			if g.Peek {
				cost = 0
			}
			d, next, err := algo.Decide(nil, &it.Spec, st, now, cost)
			if err != nil {
				panic(err)
			}
			res[i].Decision = d
			if d.Allowed {
				tent[key] = next
			} else {
				allOK = false
			}
		}
		write := allOK || !g.All
		for _, i := range g.Items {
			res[i].Consumed = write && !g.Peek
		}
		if write {
			for k, v := range tent {
				m.state[k] = v
			}
		}
	}
	return res
}

func answer(r *rls.Response) rlstest.Answer {
	a := rlstest.Answer{Overall: "OK"}
	if r.OverLimit {
		a.Overall = "OVER_LIMIT"
	}
	for _, st := range r.Statuses {
		as := rlstest.AnswerStatus{Code: "OK", Remaining: st.Remaining, UntilReset: st.UntilReset}
		if st.OverLimit {
			as.Code = "OVER_LIMIT"
		}
		if st.Limit != nil {
			as.HasLimit, as.Limit, as.Name = true, st.Limit.RequestsPerUnit, st.Limit.Name
		}
		a.Statuses = append(a.Statuses, as)
	}
	return a
}

// TestReadmeScenariosInMemory runs every envoy ratelimit README example
// (and limitd's extensions) through Plan and Respond.
func TestReadmeScenariosInMemory(t *testing.T) {
	rlstest.Run(t, func(t *testing.T, _ *rlstest.Scenario, d *rls.Domain) func(rls.Request) (rlstest.Answer, error) {
		m := &memStore{state: map[string][]byte{}}
		return func(req rls.Request) (rlstest.Answer, error) {
			var dom *rls.Domain
			if req.Domain == d.Name() {
				dom = d
			}
			p, err := rls.NewPlan(dom, &req)
			if err != nil {
				return rlstest.Answer{}, err
			}
			now := time.Now()
			return answer(p.Respond(m.decide(p, now.UnixNano()), now)), nil
		}
	})
}
