package core

import (
	"strconv"
	"strings"
)

// News is what one message says: a pause until Pause (server µs), a
// first limit lowered to Limit until LimitEnd (LimitSet: the message says
// what the limit is; Limit 0 ends a lowering), or the slots a process
// claims near the limit (Taken, scores in server µs, one per unit, by the
// process named From: see Known.Take).
type News struct {
	Pause           int64
	Limit, LimitEnd int64
	LimitSet        bool
	Taken           []int64
	From            string
}

// String encodes n as published: "p <end>", "l <limit> <end>" or
// "t <from> <score>...".
func (n News) String() string {
	switch {
	case len(n.Taken) > 0:
		b := []byte("t " + n.From)
		for _, s := range n.Taken {
			b = strconv.AppendInt(append(b, ' '), s, 10)
		}
		return string(b)
	case n.LimitSet:
		return "l " + strconv.FormatInt(n.Limit, 10) + " " + strconv.FormatInt(n.LimitEnd, 10)
	}
	return "p " + strconv.FormatInt(n.Pause, 10)
}

// MaxTaken bounds the scores one message of taken slots may list: a
// round's claims, at most a batch (see Rules.BatchUnits).
const MaxTaken = 1024

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
	case f[0] == "t" && len(f) >= 3 && len(f) <= 2+MaxTaken:
		n.From = f[1]
		n.Taken = make([]int64, 0, len(f)-2)
		for i := 2; i < len(f); i++ {
			n.Taken = append(n.Taken, num(i))
		}
	default:
		ok = false
	}
	return n, ok
}
