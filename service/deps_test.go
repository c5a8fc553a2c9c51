package service

import (
	"reflect"
	"strings"
	"testing"
)

// TestNewRefusesAMissingCapability: every field of Deps is required, and
// New names the one that is nil rather than serving without it (the
// over-limit cache, leases or the leader hint silently off).
func TestNewRefusesAMissingCapability(t *testing.T) {
	full := DepsOf(newNode("api"))
	New(full, Config{}) // all present: no panic
	fields := reflect.TypeOf(full).NumField()
	for i := 0; i < fields; i++ {
		d := full
		f := reflect.ValueOf(&d).Elem().Field(i)
		name := reflect.TypeOf(d).Field(i).Name
		f.Set(reflect.Zero(f.Type()))
		func() {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatalf("New with Deps.%s nil did not panic", name)
				}
				if msg, _ := r.(string); !strings.Contains(msg, "Deps."+name+" is nil") {
					t.Fatalf("New with Deps.%s nil panicked with %v, want it named", name, r)
				}
			}()
			New(d, Config{})
		}()
	}
}

// TestDepsOfWiresEveryCapability: DepsOf fills every field from the one
// value, so a fake passes each capability it has.
func TestDepsOfWiresEveryCapability(t *testing.T) {
	d := reflect.ValueOf(DepsOf(newNode("api")))
	for i := 0; i < d.NumField(); i++ {
		if d.Field(i).IsNil() {
			t.Fatalf("DepsOf leaves %s nil", d.Type().Field(i).Name)
		}
	}
}
