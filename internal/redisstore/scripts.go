package redisstore

import "github.com/redis/go-redis/v9"

// Scripts returns every Lua script the package sends, by the name of its
// variable: a test that checks what the scripts do (the keys they touch)
// ranges over it. TestScriptsListsEveryScript holds it to the package's
// source: each redis.NewScript is a package-level variable listed here,
// under its name, with its text.
func Scripts() map[string]*redis.Script {
	return map[string]*redis.Script{
		"CompactScript":      CompactScript,
		"CountScript":        CountScript,
		"CounterScript":      CounterScript,
		"GiveBackScript":     GiveBackScript,
		"LeaseScript":        LeaseScript,
		"PeakScript":         PeakScript,
		"PlaceScript":        PlaceScript,
		"ReleaseScript":      ReleaseScript,
		"RenewScript":        RenewScript,
		"TenantPeakScript":   TenantPeakScript,
		"TenantScoresScript": TenantScoresScript,
		"TenantScript":       TenantScript,
		"TrimScript":         TrimScript,
		"WideScript":         WideScript,
	}
}
