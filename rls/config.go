// Package rls owns envoy ratelimit's configuration format and its matching
// rules: parsing a domain's YAML (a file, a directory of files, or a request
// body) into a validated, canonical Config; compiling it into a Domain that
// matches request descriptors to rules exactly as envoyproxy/ratelimit does
// (key and value, then wildcard values, then key alone, one nesting level per
// descriptor entry, no backtracking) and resolves `replaces`; and turning an
// RLS request into checks (a Plan) and the checks' decisions back into an
// RLS answer (Plan.Respond). Each rule maps to an algo.Spec: by default a
// fixed window aligned like envoy ratelimit's (unix time divided by the
// unit), or, with limitd's per-rule extensions, another algorithm or a
// calendar window in a time zone.
//
// It knows no transport: the gRPC front end, the HTTP admin endpoints and the
// state machine (which stores Canonical bytes) use it.
package rls

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Bounds on a domain's configuration. They keep a bad or hostile config from
// costing unbounded memory or matching time.
const (
	// MaxConfigBytes bounds one configuration file or request body.
	MaxConfigBytes = 1 << 20
	// MaxDomainLen bounds a domain name.
	MaxDomainLen = 256
	// MaxDepth bounds the nesting of descriptors (and so the number of
	// entries in a request descriptor that can match).
	MaxDepth = 16
	// MaxDescriptorsPerDomain bounds the descriptors of one domain, counted
	// over all levels.
	MaxDescriptorsPerDomain = 10000
	// MaxStringLen bounds a key, a value, a rule name or a time zone.
	MaxStringLen = 1024
)

// Counting says how a request with several descriptors is counted (a limitd
// extension, per domain).
type Counting string

const (
	// CountAtomic (the default) decides all descriptors of a request as one
	// atomic step: if any refuses, none is consumed.
	CountAtomic Counting = "atomic"
	// CountIndependent counts each descriptor on its own as envoy ratelimit
	// does: the allowed ones are consumed even when another one refuses. For
	// side-by-side migrations.
	CountIndependent Counting = "independent"
)

// Config is one domain's configuration in envoy ratelimit's format plus
// limitd's extensions (Counting per domain; Algorithm, Burst and Timezone per
// rate_limit). Its JSON encoding, produced by Canonical, is what the cluster
// replicates.
type Config struct {
	Domain      string       `json:"domain"`
	Counting    Counting     `json:"counting,omitempty"`
	Descriptors []Descriptor `json:"descriptors,omitempty"`
}

// Descriptor is one entry of a descriptor list: it matches a request entry
// with Key and, when Value is set, that value (a value containing '*' is a
// wildcard, each '*' matching any run of characters).
type Descriptor struct {
	Key            string     `json:"key"`
	Value          string     `json:"value,omitempty"`
	RateLimit      *RateLimit `json:"rate_limit,omitempty"`
	ShadowMode     bool       `json:"shadow_mode,omitempty"`
	DetailedMetric bool       `json:"detailed_metric,omitempty"`
	ValueToMetric  bool       `json:"value_to_metric,omitempty"`
	ShareThreshold bool       `json:"share_threshold,omitempty"`
	// Plan (a limitd extension), in place of RateLimit: a request
	// descriptor that matches is decided under its key's plan, the key
	// being the value of the request's last entry (the one this
	// descriptor matched), verbatim — the same key a check over HTTP or
	// gRPC names, so both spend one budget.
	Plan        bool         `json:"plan,omitempty"`
	Descriptors []Descriptor `json:"descriptors,omitempty"`

	line int // where it starts in the YAML, for errors (0: unknown)
}

// RateLimit is a rule: RequestsPerUnit per Unit, or Unlimited. Algorithm,
// Burst and Timezone are limitd extensions.
type RateLimit struct {
	Name            string    `json:"name,omitempty"`
	Replaces        []Replace `json:"replaces,omitempty"`
	Unit            string    `json:"unit,omitempty"`
	RequestsPerUnit uint32    `json:"requests_per_unit"`
	Unlimited       bool      `json:"unlimited,omitempty"`
	Algorithm       string    `json:"algorithm,omitempty"`
	Burst           int64     `json:"burst,omitempty"`
	Timezone        string    `json:"timezone,omitempty"`

	line int // where it starts in the YAML, for errors (0: unknown)
}

// Replace names a rule that a rule replaces.
type Replace struct {
	Name string `json:"name"`
}

// Error is a configuration error. File is where the config came from (a
// path, or "" for a request body), Line its line when known, Field the YAML
// path of the mistake ("descriptors[0].rate_limit.unit") and Descriptor the
// envoy-style key of the descriptor it is in ("messaging.message_type_marketing").
type Error struct {
	File       string
	Line       int
	Field      string
	Descriptor string
	Message    string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		b.WriteString("line " + strconv.Itoa(e.Line) + ": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	if e.Descriptor != "" {
		b.WriteString("descriptor " + e.Descriptor + ": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Canonical is the config's replicated form: compact JSON with fields in a
// fixed order, so equal configs are equal bytes. Parse reads it back.
func (c *Config) Canonical() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("rls: marshal config: %v", err)) // only plain fields: cannot fail
	}
	return b
}

// Parse decodes one domain's configuration (YAML, or JSON, which is YAML) and
// validates it completely: the result is either a compiled Domain or an
// *Error naming file (used only in messages), the field and the line.
func Parse(file string, data []byte) (*Domain, error) {
	c, err := decode(file, data)
	if err != nil {
		return nil, err
	}
	return Compile(file, c)
}

// decode turns YAML into a Config, refusing unknown keys and wrong types.
func decode(file string, data []byte) (*Config, error) {
	if len(data) > MaxConfigBytes {
		return nil, &Error{File: file, Message: fmt.Sprintf("larger than %d bytes", MaxConfigBytes)}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&doc); err != nil {
		return nil, &Error{File: file, Message: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: file, Line: extra.Line, Message: "more than one YAML document (one domain per document)"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	d := decoder{file: file}
	c := &Config{}
	d.mapping(root, "", func(key string, v *yaml.Node, field string) {
		switch key {
		case "domain":
			c.Domain = d.str(v, field)
		case "counting":
			c.Counting = Counting(d.str(v, field))
		case "descriptors":
			c.Descriptors = d.descriptors(v, field, 1)
		default:
			d.fail(v, field, "unknown field (want domain, descriptors or counting)")
		}
	})
	if d.err != nil {
		return nil, d.err
	}
	return c, nil
}

// decoder walks a YAML tree; the first error sticks.
type decoder struct {
	file  string
	err   *Error
	count int
}

func (d *decoder) fail(n *yaml.Node, field, msg string) {
	if d.err == nil {
		d.err = &Error{File: d.file, Line: n.Line, Field: field, Message: msg}
	}
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// mapping calls fn for each key of a mapping node, in order.
func (d *decoder) mapping(n *yaml.Node, field string, fn func(key string, v *yaml.Node, field string)) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, field, "want a mapping")
		return
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content) && d.err == nil; i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			d.fail(k, field, "keys must be plain strings")
			return
		}
		f := join(field, k.Value)
		if seen[k.Value] {
			d.fail(k, f, "repeated key")
			return
		}
		seen[k.Value] = true
		fn(k.Value, v, f)
	}
}

func (d *decoder) scalar(n *yaml.Node, field string) (*yaml.Node, bool) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(n, field, "want a single value")
		return nil, false
	}
	return n, true
}

// str reads any scalar as text, as envoy ratelimit does (value: 123 is "123").
func (d *decoder) str(n *yaml.Node, field string) string {
	s, ok := d.scalar(n, field)
	if !ok {
		return ""
	}
	if s.Tag == "!!null" {
		return ""
	}
	if len(s.Value) > MaxStringLen {
		d.fail(n, field, fmt.Sprintf("longer than %d bytes", MaxStringLen))
		return ""
	}
	return s.Value
}

func (d *decoder) boolean(n *yaml.Node, field string) bool {
	s, ok := d.scalar(n, field)
	if !ok {
		return false
	}
	var b bool
	if s.Tag != "!!bool" || s.Decode(&b) != nil {
		d.fail(n, field, fmt.Sprintf("want true or false, not %q", s.Value))
	}
	return b
}

func (d *decoder) integer(n *yaml.Node, field string, max uint64) uint64 {
	s, ok := d.scalar(n, field)
	if !ok {
		return 0
	}
	v, err := strconv.ParseUint(s.Value, 0, 64)
	if s.Tag != "!!int" || err != nil || v > max {
		d.fail(n, field, fmt.Sprintf("want a whole number from 0 to %d, not %q", max, s.Value))
	}
	return v
}

func (d *decoder) descriptors(n *yaml.Node, field string, depth int) []Descriptor {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "want a list of descriptors")
		return nil
	}
	if depth > MaxDepth {
		d.fail(n, field, fmt.Sprintf("descriptors nested deeper than %d levels", MaxDepth))
		return nil
	}
	out := make([]Descriptor, 0, len(n.Content))
	for i, item := range n.Content {
		if d.err != nil {
			return nil
		}
		if d.count++; d.count > MaxDescriptorsPerDomain {
			d.fail(item, field, fmt.Sprintf("more than %d descriptors in the domain", MaxDescriptorsPerDomain))
			return nil
		}
		f := fmt.Sprintf("%s[%d]", field, i)
		desc := Descriptor{line: item.Line}
		d.mapping(item, f, func(key string, v *yaml.Node, field string) {
			switch key {
			case "key":
				desc.Key = d.str(v, field)
			case "value":
				desc.Value = d.str(v, field)
			case "rate_limit":
				desc.RateLimit = d.rateLimit(v, field)
			case "descriptors":
				desc.Descriptors = d.descriptors(v, field, depth+1)
			case "shadow_mode":
				desc.ShadowMode = d.boolean(v, field)
			case "detailed_metric":
				desc.DetailedMetric = d.boolean(v, field)
			case "value_to_metric":
				desc.ValueToMetric = d.boolean(v, field)
			case "share_threshold":
				desc.ShareThreshold = d.boolean(v, field)
			case "plan":
				desc.Plan = d.boolean(v, field)
			case "quota_mode":
				if d.boolean(v, field) {
					d.fail(v, field, "quota_mode is not supported by limitd (remove it or set it to false)")
				}
			case "metadata":
				// Accepted so envoy ratelimit configs load unchanged; limitd
				// sends no dynamic metadata, so it is not kept.
				if v.Kind != yaml.MappingNode && !(v.Kind == yaml.ScalarNode && v.Tag == "!!null") {
					d.fail(v, field, "want a mapping")
				}
			default:
				d.fail(v, field, "unknown field (want key, value, rate_limit, plan, descriptors, shadow_mode, detailed_metric, value_to_metric, share_threshold)")
			}
		})
		out = append(out, desc)
	}
	return out
}

func (d *decoder) rateLimit(n *yaml.Node, field string) *RateLimit {
	r := &RateLimit{line: n.Line}
	d.mapping(n, field, func(key string, v *yaml.Node, field string) {
		switch key {
		case "unit":
			r.Unit = d.str(v, field)
		case "requests_per_unit":
			r.RequestsPerUnit = uint32(d.integer(v, field, 1<<32-1))
		case "unlimited":
			r.Unlimited = d.boolean(v, field)
		case "name":
			r.Name = d.str(v, field)
		case "replaces":
			r.Replaces = d.replaces(v, field)
		case "algorithm":
			r.Algorithm = d.str(v, field)
		case "burst":
			r.Burst = int64(d.integer(v, field, 1<<62))
		case "timezone":
			r.Timezone = d.str(v, field)
		default:
			d.fail(v, field, "unknown field (want unit, requests_per_unit, unlimited, name, replaces, algorithm, burst, timezone)")
		}
	})
	return r
}

func (d *decoder) replaces(n *yaml.Node, field string) []Replace {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "want a list of {name: ...}")
		return nil
	}
	out := make([]Replace, 0, len(n.Content))
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		var r Replace
		d.mapping(item, f, func(key string, v *yaml.Node, field string) {
			if key != "name" {
				d.fail(v, field, "unknown field (want name)")
				return
			}
			r.Name = d.str(v, field)
		})
		out = append(out, r)
	}
	return out
}
