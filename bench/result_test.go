package bench

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/bench/report"
)

// sample is one figure of every kind a run produces.
func sample() []report.Result {
	return []report.Result{
		{Contender: report.Xdproce, Measure: report.Bandwidth, Op: report.OpWrite, Size: 65536, GbitS: 5.25},
		{Contender: report.TCP, Measure: report.Bandwidth, Op: report.OpStream, Size: 65536, GbitS: 21},
		{Contender: report.TCP, XDPAttached: true, Measure: report.Bandwidth, Op: report.OpStream, Size: 65536, GbitS: 8},
		{Contender: report.Xdproce, Measure: report.RTT, Op: report.OpSend, Size: 8, P50us: 10.5, P99us: 20, P999us: 40},
		{Contender: report.TCP, Measure: report.RTT, Op: report.OpPingPong, Size: 8, P50us: 12.5, P99us: 43, P999us: 180},
		{Contender: report.Xdproce, Measure: report.MsgRate, Op: report.OpWrite, Size: 64, QPs: 2, MmsgS: 0.5},
		{Contender: report.TCP, Measure: report.MsgRate, Op: report.OpStream, Size: 64, QPs: 4, MmsgS: 0.25},
		{Contender: report.Xdproce, Measure: report.CPUPerGB, Op: report.OpRead, Size: 1 << 20, CPUSPerGB: 1.5},
		{Contender: report.TCP, Measure: report.CPUPerGB, Op: report.OpStream, Size: 1 << 20, CPUSPerGB: 0.5},
	}
}

func TestJSONHasExactlyTheSchemaFields(t *testing.T) {
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf, sample()); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"contender measure op size gbit_s",
		"contender measure op size gbit_s",
		"contender xdp_attached measure op size gbit_s",
		"contender measure op size p50_us p99_us p999_us",
		"contender measure op size p50_us p99_us p999_us",
		"contender measure op size qps mmsg_s",
		"contender measure op size qps mmsg_s",
		"contender measure op size cpu_s_per_gb",
		"contender measure op size cpu_s_per_gb",
	}
	if len(doc.Results) != len(want) {
		t.Fatalf("%d results, want %d:\n%s", len(doc.Results), len(want), buf.String())
	}
	for i, r := range doc.Results {
		fields := strings.Fields(want[i])
		if len(r) != len(fields) {
			t.Errorf("result %d has fields %v, want %v", i, r, fields)
		}
		for _, f := range fields {
			if _, ok := r[f]; !ok {
				t.Errorf("result %d lacks %q: %v", i, f, r)
			}
		}
	}
	if got := doc.Results[5]; got["contender"] != "xdproce" || got["measure"] != "msgrate" || got["op"] != "write" ||
		got["size"] != 64.0 || got["qps"] != 2.0 || got["mmsg_s"] != 0.5 {
		t.Errorf("message-rate figure written as %v", got)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf, sample()); err != nil {
		t.Fatal(err)
	}
	got, err := report.ReadJSON(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sample()) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, sample())
	}
}

func TestReadJSONRejectsWhatTheSchemaDoesNot(t *testing.T) {
	for name, doc := range map[string]string{
		"no results":        `{}`,
		"unknown contender": `{"results":[{"contender":"rxe","measure":"bandwidth","op":"write","size":64,"gbit_s":1}]}`,
		"unknown measure":   `{"results":[{"contender":"tcp","measure":"jitter","op":"stream","size":64}]}`,
		"wrong op":          `{"results":[{"contender":"tcp","measure":"bandwidth","op":"write","size":64,"gbit_s":1}]}`,
		"missing figure":    `{"results":[{"contender":"xdproce","measure":"rtt","op":"write","size":8,"p50_us":1,"p99_us":2}]}`,
		"foreign field":     `{"results":[{"contender":"xdproce","measure":"bandwidth","op":"read","size":64,"gbit_s":1,"mmsg_s":2}]}`,
		"unknown field":     `{"results":[{"contender":"xdproce","measure":"bandwidth","op":"read","size":64,"gbit_s":1,"color":"red"}]}`,
		"xdp on xdproce":    `{"results":[{"contender":"xdproce","xdp_attached":true,"measure":"bandwidth","op":"read","size":64,"gbit_s":1}]}`,
		"no size":           `{"results":[{"contender":"tcp","measure":"bandwidth","op":"stream","gbit_s":1}]}`,
	} {
		if _, err := report.ReadJSON(strings.NewReader(doc)); err == nil {
			t.Errorf("%s: accepted %s", name, doc)
		}
	}
}

func TestWriteJSONRefusesAnInvalidFigure(t *testing.T) {
	err := report.WriteJSON(&bytes.Buffer{}, []report.Result{{Contender: report.TCP, Measure: report.Bandwidth, Op: report.OpRead, Size: 64, GbitS: 1}})
	if err == nil {
		t.Fatal("a TCP READ figure was written")
	}
}
