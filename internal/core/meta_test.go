package core

import "testing"

func TestMetaLimitAt(t *testing.T) {
	for _, tc := range []struct {
		m     Meta
		now   int64
		limit int
		want  int
	}{
		{Meta{}, 10, 100, 100},
		{Meta{Limit: 40, LimitEnd: 20}, 10, 100, 40},
		{Meta{Limit: 40, LimitEnd: 10}, 10, 100, 100},  // ended at now
		{Meta{Limit: 400, LimitEnd: 20}, 10, 100, 100}, // a higher limit never raises
		{Meta{Limit: 40}, 10, 100, 100},                // no end: nothing in force
	} {
		if got := tc.m.LimitAt(tc.now, tc.limit); got != tc.want {
			t.Errorf("%+v.LimitAt(%d, %d) = %d, want %d", tc.m, tc.now, tc.limit, got, tc.want)
		}
	}
}

func TestMetaWriteEmpty(t *testing.T) {
	if !(MetaWrite{News: &News{Pause: 1}}).Empty() {
		t.Error("news alone writes nothing: want Empty")
	}
	for _, m := range []MetaWrite{{Pause: 1}, {Limit: 1, LimitEnd: 2}, {ClearLimit: true}, {Backoff: 1, BackoffEnd: 2}} {
		if m.Empty() {
			t.Errorf("%+v.Empty() = true", m)
		}
	}
}
