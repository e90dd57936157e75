package redisserver

import (
	"testing"
	"time"
)

const infoBefore = "# Commandstats\r\n" +
	"cmdstat_zadd:calls=10,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_info:calls=3,usec=90,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_client|setinfo:calls=2,usec=2,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
	"\r\n# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.000000\r\n"

const infoAfter = "# Commandstats\r\n" +
	"cmdstat_zadd:calls=25,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_zcard:calls=7,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_info:calls=4,usec=90,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_client|setinfo:calls=8,usec=2,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_hello:calls=6,usec=2,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
	"\r\n# CPU\r\nused_cpu_sys:1.750000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:10.000000\r\n"

func TestSnapshotDelta(t *testing.T) {
	before, err := parseSnapshot(infoBefore)
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseSnapshot(infoAfter)
	if err != nil {
		t.Fatal(err)
	}
	if before.Calls["zadd"] != 10 || before.CPUSys != 1.5 || before.CPUUser != 2.25 {
		t.Errorf("before = %+v", before)
	}
	per, total, cpu := Delta(before, after)
	if total != 22 || per["zadd"] != 15 || per["zcard"] != 7 || len(per) != 2 {
		t.Errorf("Delta = %v, total %d; want zadd 15 + zcard 7 (info, client, hello left out)", per, total)
	}
	if cpu != 500*time.Millisecond {
		t.Errorf("cpu = %v, want 500ms (children left out)", cpu)
	}
	if _, err := parseSnapshot("# CPU\r\nused_cpu_sys:x\r\n"); err == nil {
		t.Error("a broken INFO cpu parsed")
	}
}
