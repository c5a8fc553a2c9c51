package api

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/limitd/limitd/service"
)

// slowSlotRequest is slotRequest through encoding/json only: the reference
// the fast reader must agree with.
func slowSlotRequest(s *Server, body []byte) (service.SlotRequest, *apiError) {
	var sj slotJSON
	if e := decodeStrict(body, &sj, ""); e != nil {
		return service.SlotRequest{}, e
	}
	r := service.SlotRequest{Key: sj.Key, Policy: sj.Policy, Slot: sj.Slot}
	if len(sj.Limit) > 0 && string(sj.Limit) != "null" {
		if sj.Policy != "" {
			return r, s.httpError(service.Invalid("limit", "give either policy or limit, not both"))
		}
		var e *service.Error
		if r.Limit, e = s.limits.Get(sj.Limit, "limit", decodeLimitConfig); e != nil {
			return r, s.httpError(e)
		}
	}
	return r, nil
}

// slowSettleRequest is settleRequest through encoding/json only.
func slowSettleRequest(body []byte) (service.SettleRequest, *apiError) {
	var sj settleJSON
	if e := decodeStrict(body, &sj, ""); e != nil {
		return service.SettleRequest{}, e
	}
	if sj.Cost == nil {
		return service.SettleRequest{}, invalid("cost", "is required: the actual cost")
	}
	return service.SettleRequest{Reservation: sj.Reservation, Cost: *sj.Cost}, nil
}

// slowItems decodes a batch envelope and its items one by one through
// encoding/json, as the batch routes did before the fast readers.
func slowItems[R any](s *Server, body []byte, field string, item func([]byte) (R, *apiError)) ([]R, []*service.Error, *apiError) {
	raws, e := s.costBatchItems(body, field)
	if e != nil {
		return nil, nil, e
	}
	rs, errs := eachItem(raws, field, func(raw json.RawMessage) (R, *apiError) { return item(raw) })
	return rs, errs, nil
}

// settleBody is a settle the fast reader reads.
const settleBody = `{"reservation":"r-1","cost":7}`

// pairBodies are release and settle bodies on both sides of every rule of
// the fast readers.
var pairBodies = []string{
	`{"key":"user:1","policy":"api","slot":"s-1"}`,
	` { "key" : "k" , "policy" : "api" , "slot" : "12.3.0" } `,
	`{"key":"k","limit":` + fastLimit + `,"slot":"s"}`,
	`{"key":"k","limit":null,"policy":"api","slot":"s"}`,
	`{"key":"k","policy":"api","limit":` + fastLimit + `,"slot":"s"}`, // both: refused
	`{"key":"k","limit":{"algorithm":"concurrency","limit":2,"hold":"30s"},"slot":"s"}`,
	`{"key":"k","limit":{"algorithm":"nope"},"slot":"s"}`,
	`{"key":"k","policy":"api","slot":"s","slot":"t"}`,
	`{"key":"k","policy":"api","SLOT":"s"}`,
	`{"key":"k","policy":"api","Slot":"s","slot":"t"}`,
	`{"key":"k","policy":"api","slot":"s\u00e9"}`,
	`{"key":"k\u00e9","policy":"api","slot":"é"}`,
	"{\"key\":\"k\xff\",\"policy\":\"api\",\"slot\":\"s\"}",
	"{\"key\":\"k\",\"policy\":\"api\",\"slot\":\"s\xfe\"}",
	`{"key":"k","policy":"p","limit":` + fastLimit + `,"slot":"s"}`, // both, a one-letter policy
	`{"key":"k","policy":"api","slot":1}`,
	`{"key":"k","policy":"api","slot":null}`,
	`{"key":"k","policy":"api","slot":"s","extra":1}`,
	`{"key":"k","policy":"api","slot":"s"} x`,
	`{}`,
	settleBody,
	`{"reservation":"r-1","cost":-3}`,
	`{ "cost" : 0 , "reservation" : "abc.def" }`,
	`{"reservation":"r-1"}`,
	`{"reservation":"r-1","cost":null}`,
	`{"reservation":"r-1","cost":7.0}`,
	`{"reservation":"r-1","cost":1e3}`,
	`{"reservation":"r-1","cost":9223372036854775807}`,
	`{"reservation":"r-1","cost":9223372036854775808}`,
	`{"reservation":"r-1","cost":"7"}`,
	`{"reservation":"r-1","cost":7,"cost":8}`,
	`{"reservation":"r-1","Cost":7}`,
	`{"reservation":"r-1","cost":7,"key":"k"}`,
}

// pairAgrees checks one body as a single release, a single settle, and as
// an item of each batch (alone, and beside a valid item): the fast and slow
// decoders answer alike. It reports how many of the four took a fast path.
func pairAgrees(t *testing.T, s *Server, body []byte) int {
	t.Helper()
	fast := 0
	var f fastSlotJSON
	if fastSlot(body, &f) {
		fast++
		if e := scanJSON(body, "", true, 0); e != nil || !json.Valid(body) {
			t.Fatalf("%q: fastSlot accepts what scanJSON or encoding/json refuses: %+v", body, e)
		}
	}
	got, gotErr := s.slotRequest(body)
	want, wantErr := slowSlotRequest(s, body)
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErr, wantErr) {
		t.Fatalf("release %q:\n got  %+v, %+v\n want %+v, %+v", body, got, gotErr, want, wantErr)
	}
	var fs fastSettleJSON
	if fastSettle(body, &fs) {
		fast++
		if e := scanJSON(body, "", true, 0); e != nil || !json.Valid(body) {
			t.Fatalf("%q: fastSettle accepts what scanJSON or encoding/json refuses: %+v", body, e)
		}
	}
	gs, gsErr := settleRequest(body)
	ws, wsErr := slowSettleRequest(body)
	if !reflect.DeepEqual(gs, ws) || !reflect.DeepEqual(gsErr, wsErr) {
		t.Fatalf("settle %q:\n got  %+v, %+v\n want %+v, %+v", body, gs, gsErr, ws, wsErr)
	}
	for _, batch := range []string{string(body), string(body) + `,` + pairBodies[0], settleBody + `, ` + string(body)} {
		for _, field := range []string{"releases", "renewals"} {
			b := []byte(`{"` + field + `":[` + batch + `]}`)
			if fastItems(b, field, s.maxBatch, func(p *fastParser) bool { var x fastSlotJSON; return p.slotItem(&x) }) {
				fast++
				if e := scanJSON(b, "", true, 0); e != nil || !json.Valid(b) {
					t.Fatalf("%s: the fast batch reader accepts what scanJSON or encoding/json refuses: %+v", b, e)
				}
			}
			got, gotErrs, gotErr := s.decodeSlotBatch(b, field)
			want, wantErrs, wantErr := slowItems(s, b, field, func(raw []byte) (service.SlotRequest, *apiError) { return slowSlotRequest(s, raw) })
			if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErrs, wantErrs) || !reflect.DeepEqual(gotErr, wantErr) {
				t.Fatalf("%s:\n got  %+v, %+v, %+v\n want %+v, %+v, %+v", b, got, gotErrs, gotErr, want, wantErrs, wantErr)
			}
		}
		b := []byte(`{"settles":[` + batch + `]}`)
		if fastItems(b, "settles", s.maxBatch, func(p *fastParser) bool { var x fastSettleJSON; return p.settleItem(&x) }) {
			fast++
			if e := scanJSON(b, "", true, 0); e != nil || !json.Valid(b) {
				t.Fatalf("%s: the fast batch reader accepts what scanJSON or encoding/json refuses: %+v", b, e)
			}
		}
		got, gotErrs, gotErr := s.decodeSettleBatch(b)
		want, wantErrs, wantErr := slowItems(s, b, "settles", slowSettleRequest)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErrs, wantErrs) || !reflect.DeepEqual(gotErr, wantErr) {
			t.Fatalf("%s:\n got  %+v, %+v, %+v\n want %+v, %+v, %+v", b, got, gotErrs, gotErr, want, wantErrs, wantErr)
		}
	}
	return fast
}

func TestFastPairDecoders(t *testing.T) {
	s, _ := fuzzServer()
	fast := 0
	for _, body := range pairBodies {
		fast += pairAgrees(t, s, []byte(body))
	}
	// Envelopes: empty, null, too many (MaxBatch 8), an unknown member, a
	// repeated one, a misspelled field, trailing data.
	item := pairBodies[0]
	for _, b := range []string{`{"releases":[]}`, `{"releases":null}`, `{"releases":[` + strings.Repeat(item+",", 8) + item + `]}`,
		`{"releases":[` + strings.Repeat(item+",", 7) + item + `]}`, `{"releases":[` + item + `],"x":1}`,
		`{"releases":[` + item + `],"releases":[` + item + `]}`, `{"Releases":[` + item + `]}`, `{"releases":[` + item + `]} {}`,
		`{"releases":[` + item + `,]}`, `{"releases":[` + item + `]`, ` {"releases" : [ ` + item + ` ] } `} {
		got, gotErrs, gotErr := s.decodeSlotBatch([]byte(b), "releases")
		want, wantErrs, wantErr := slowItems(s, []byte(b), "releases", func(raw []byte) (service.SlotRequest, *apiError) { return slowSlotRequest(s, raw) })
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErrs, wantErrs) || !reflect.DeepEqual(gotErr, wantErr) {
			t.Errorf("%s:\n got  %+v, %+v, %+v\n want %+v, %+v, %+v", b, got, gotErrs, gotErr, want, wantErrs, wantErr)
		}
	}
	if fast < 20 {
		t.Fatalf("only %d decodes took a fast path: the test no longer covers it", fast)
	}
	// The errors the fast side leaves to the slow one name their field.
	for body, field := range map[string]string{
		`{"settles":[{"reservation":"r","cost":1},{"reservation":"r"}]}`:                                                       "settles[1].cost",
		`{"settles":[{"reservation":"r","cost":"1"}]}`:                                                                         "settles[0].cost",
		`{"settles":[{"reservation":"r","cost":1,"cost":2}]}`:                                                                  "settles[0].cost",
		`{"releases":[{"key":"k","policy":"api","slot":"s","color":1}]}`:                                                       "releases[0].color",
		`{"releases":[{"key":"k","policy":"api","slot":"s"},{"key":"k","policy":"api","limit":` + fastLimit + `,"slot":"s"}]}`: "releases[1].limit",
	} {
		var errs []*service.Error
		if strings.HasPrefix(body, `{"settles"`) {
			_, errs, _ = s.decodeSettleBatch([]byte(body))
		} else {
			_, errs, _ = s.decodeSlotBatch([]byte(body), "releases")
		}
		var named string
		for _, e := range errs {
			if e != nil {
				named = e.Field
			}
		}
		if named != field {
			t.Errorf("%s: error names %q, want %q (%+v)", body, named, field, errs)
		}
	}
}

// TestFastPairMutations runs pairAgrees on random edits of pairBodies.
func TestFastPairMutations(t *testing.T) {
	s, _ := fuzzServer()
	rng := rand.New(rand.NewPCG(35, 2))
	perBody := 150
	if testing.Short() {
		perBody = 30
	}
	fast := 0
	for _, body := range pairBodies {
		for range perBody {
			fast += pairAgrees(t, s, mutate(rng, []byte(body)))
		}
	}
	if min := len(pairBodies) * perBody / 20; fast < min {
		t.Fatalf("only %d decodes took a fast path, want %d", fast, min)
	}
}

// FuzzFastPair compares the fast release and settle readers with
// encoding/json on any body.
func FuzzFastPair(f *testing.F) {
	for _, b := range pairBodies {
		f.Add([]byte(b))
	}
	s, _ := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		pairAgrees(t, s, body)
	})
}
