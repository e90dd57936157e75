package core

import (
	"strconv"
	"strings"
)

// News is what one message says: a pause until Pause (server µs), and a
// first limit lowered to Limit until LimitEnd (LimitSet: the message says
// what the limit is; Limit 0 ends a lowering).
type News struct {
	Pause           int64
	Limit, LimitEnd int64
	LimitSet        bool
}

// String encodes n as published: "p <end>" or "l <limit> <end>".
func (n News) String() string {
	if n.LimitSet {
		return "l " + strconv.FormatInt(n.Limit, 10) + " " + strconv.FormatInt(n.LimitEnd, 10)
	}
	return "p " + strconv.FormatInt(n.Pause, 10)
}

// ParseNews decodes a published message; ok is false for anything else.
func ParseNews(s string) (n News, ok bool) {
	f := strings.Fields(s)
	num := func(i int) int64 {
		if i >= len(f) {
			ok = false
			return 0
		}
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || v < 0 {
			ok = false
		}
		return v
	}
	ok = len(f) > 0
	switch {
	case !ok:
	case f[0] == "p" && len(f) == 2:
		n.Pause = num(1)
	case f[0] == "l" && len(f) == 3:
		n.Limit, n.LimitEnd, n.LimitSet = num(1), num(2), true
	default:
		ok = false
	}
	return n, ok
}
