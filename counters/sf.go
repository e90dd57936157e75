package counters

import (
	"strconv"
	"strings"
)

// sfItem is one member of a structured-field list (RFC 9651) as the IETF
// RateLimit field uses it: a name (a string or token) and its parameters,
// kept as their text.
type sfItem struct {
	name   string
	params map[string]string
}

// sfList parses the field lines of a structured-field list, tolerantly: a
// member it cannot read is skipped, not the whole field. Inner lists are
// not used by the RateLimit fields and are read as plain members.
func sfList(lines []string) []sfItem {
	var items []sfItem
	for _, line := range lines {
		for _, member := range splitOutsideQuotes(line, ',') {
			parts := splitOutsideQuotes(member, ';')
			name := strings.TrimSpace(parts[0])
			if name == "" {
				continue
			}
			it := sfItem{name: sfUnquote(name), params: map[string]string{}}
			for _, p := range parts[1:] {
				k, v, found := strings.Cut(strings.TrimSpace(p), "=")
				if !found {
					v = "?1" // a parameter without a value is boolean true
				}
				it.params[strings.TrimSpace(k)] = sfUnquote(strings.TrimSpace(v))
			}
			items = append(items, it)
		}
	}
	return items
}

// splitOutsideQuotes splits s at each sep that is not inside a quoted
// string.
func splitOutsideQuotes(s string, sep byte) []string {
	var (
		out     []string
		start   int
		quoted  bool
		escaped bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// sfUnquote returns the content of a quoted string, or s itself.
func sfUnquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		var b strings.Builder
		for i := 1; i < len(s)-1; i++ {
			if s[i] == '\\' && i+1 < len(s)-1 {
				i++
			}
			b.WriteByte(s[i])
		}
		return b.String()
	}
	return s
}

// sfInt parses a structured-field integer (at most 15 digits).
func sfInt(v string) (int64, bool) {
	if v == "" || len(v) > 16 {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

// indexItem returns the index of the item named name, or -1.
func indexItem(items []sfItem, name string) int {
	for i, it := range items {
		if it.name == name {
			return i
		}
	}
	return -1
}
