package harness

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/go-throttler/throttler"
)

// The library's Stats, as each replica of the far, redis-fault and tenants
// scenarios reported them at its end (ReplicaResult.Stats), are kept
// whole in the JSON (Row.Stats) and written in the Markdown field by field
// (statsLine), by reflection: the counters the library adds (late sends,
// sends re-slotted at the connection, retried rounds, a histogram of how
// late requests were written) appear in both without a change here.

// statsLine is one replica's Stats on one line: every field that is not
// zero, as Name=value (durations as durations, arrays and slices as
// [a b c], nested structs as Name.Field=value).
func statsLine(raw json.RawMessage) string {
	var st throttler.Stats
	if err := json.Unmarshal(raw, &st); err != nil {
		return "unreadable: " + err.Error()
	}
	var parts []string
	appendFields(&parts, "", reflect.ValueOf(st))
	if len(parts) == 0 {
		return "all zero"
	}
	return strings.Join(parts, " ")
}

var durationType = reflect.TypeOf(time.Duration(0))

// appendFields appends v's exported fields that are not zero.
func appendFields(parts *[]string, prefix string, v reflect.Value) {
	for i := range v.NumField() {
		ft := v.Type().Field(i)
		fv := v.Field(i)
		if !ft.IsExported() || fv.IsZero() {
			continue
		}
		name := prefix + ft.Name
		if fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Time{}) {
			appendFields(parts, name+".", fv)
			continue
		}
		*parts = append(*parts, name+"="+formatValue(fv))
	}
}

// formatValue formats one field's value.
func formatValue(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()).String()
	case v.Type() == reflect.TypeOf(time.Time{}):
		return v.Interface().(time.Time).UTC().Format("15:04:05.000")
	case v.Kind() == reflect.Array || v.Kind() == reflect.Slice:
		items := make([]string, v.Len())
		for i := range items {
			items[i] = formatValue(v.Index(i))
		}
		return "[" + strings.Join(items, " ") + "]"
	}
	return fmt.Sprint(v.Interface())
}

// writeStats writes, for each row with Stats, one line per replica.
func writeStats(b *strings.Builder, rows []Row, multi bool) {
	var lines []string
	for _, row := range rows {
		for i, raw := range row.Stats {
			if len(raw) == 0 {
				continue
			}
			lines = append(lines, fmt.Sprintf("- %s/%s, replica %d: %s", row.Scenario, runLabel(row.Impl, row.Run, multi), i, statsLine(raw)))
		}
	}
	if len(lines) > 0 {
		b.WriteString("The library's Stats at the end, per replica (fields not zero; JSON: library_stats):\n\n" + strings.Join(lines, "\n") + "\n\n")
	}
}
