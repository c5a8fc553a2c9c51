package service

import (
	"strconv"
	"sync"
	"testing"
	"unsafe"
)

// TestInterner: equal bytes give the same string while there is room; past
// Max the value is still right, only not shared; concurrent use is safe.
func TestInterner(t *testing.T) {
	in := Interner{Max: 3}
	a, b := in.Get([]byte("api")), in.Get([]byte("api"))
	if a != "api" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("%q and %q are not one interned string", a, b)
	}
	in.Get([]byte("bb"))
	in.Get([]byte("cc"))
	x, y := in.Get([]byte("dd")), in.Get([]byte("dd"))
	if x != "dd" || y != "dd" {
		t.Fatalf("past Max: %q, %q, want %q", x, y, "dd")
	}
	if unsafe.StringData(x) == unsafe.StringData(y) || in.Len() != 3 {
		t.Fatalf("past Max the set grew to %d (want 3) or shared a string", in.Len())
	}
	if c := in.Get([]byte("cc")); c != "cc" {
		t.Fatalf("got %q, want cc", c)
	}

	var wg sync.WaitGroup
	many := Interner{Max: 50}
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if s := many.Get([]byte(strconv.Itoa(i % 100))); s != strconv.Itoa(i%100) {
					t.Errorf("got %q, want %d", s, i%100)
					return
				}
			}
		}()
	}
	wg.Wait()
	if many.Len() != 50 {
		t.Fatalf("%d strings interned, want the bound 50", many.Len())
	}
}
