package throttlertest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-throttler/throttler/throttlertest"
)

// exampleT stands in for the *testing.T of a test, so that the examples
// run: it runs its cleanups when done.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                   {}
func (e *exampleT) Cleanup(f func())        { e.cleanups = append(e.cleanups, f) }
func (*exampleT) Errorf(string, ...any)     {}
func (*exampleT) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (e *exampleT) done() {
	for _, f := range slices.Backward(e.cleanups) {
		f()
	}
}

// A test of code that waits for quota, in real time: keep its window
// short. (In a testing/synctest bubble, an hour's window takes no longer:
// see Example_synctest.)
func ExampleNew() {
	t := &exampleT{} // a test's t
	defer t.done()

	th := throttlertest.New(t, 3, 50*time.Millisecond)
	start := time.Now()
	for range 4 {
		if err := th.Wait(context.Background()); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("the 4th call waited for the window:", time.Since(start) >= 50*time.Millisecond)
	// Output: the 4th call waited for the window: true
}

// Two replicas of a service hold to one quota: each has its own client of
// one embedded Redis, and a Throttler on the same key.
func ExampleRedis_Throttler() {
	t := &exampleT{} // a test's t
	defer t.done()

	r := throttlertest.NewRedis(t)
	a, b := r.Throttler(3, time.Hour), r.Throttler(3, time.Hour)
	ctx := context.Background()
	var got []bool
	for i := range 4 {
		th := a
		if i%2 == 1 {
			th = b
		}
		res, err := th.Allow(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		got = append(got, res.Allowed)
	}
	fmt.Println(got)
	// Output: [true true true false]
}

// A test of code that waits an hour for quota, in a testing/synctest
// bubble: the hour is virtual, and the test takes milliseconds
// (TestSyncAllWaitsPastAWindow runs this very test).
func Example_synctest() {
	test := func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			th := throttlertest.New(t, 100, time.Hour)
			start := time.Now()
			made, err := syncAll(t.Context(), th, 150) // the code under test
			if err != nil || made != 150 {
				t.Fatalf("syncAll: %d calls, %v", made, err)
			}
			if waited := time.Since(start); waited < time.Hour {
				t.Errorf("150 calls at 100 an hour took %s, want at least an hour", waited)
			}
		})
	}
	_ = test // func TestSyncAll(t *testing.T) { test(t) }
}
