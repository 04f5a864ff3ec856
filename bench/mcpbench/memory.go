package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// memorySample is what Usher's Go runtime has counted so far, read from
// its debug listener's expvar (/debug/vars, "memstats"): the number of
// heap allocations, their bytes and the collector's cycles. Unlike CPU
// time, these do not depend on what else the machine is doing, so a change
// to the path shows in them even on a loaded machine.
type memorySample struct {
	Mallocs    uint64 `json:"Mallocs"`
	TotalAlloc uint64 `json:"TotalAlloc"`
	NumGC      uint32 `json:"NumGC"`
}

// memoryPerCall is the difference of two memorySamples per call.
type memoryPerCall struct {
	allocs, bytes, gcs float64
}

// sampleMemory reads Usher's memory statistics from its debug listener.
func sampleMemory(ctx context.Context, addr string) (memorySample, error) {
	resp, err := get(ctx, "http://"+addr+"/debug/vars")
	if err != nil {
		return memorySample{}, fmt.Errorf("usher's /debug/vars: %w", err)
	}
	defer resp.Body.Close()
	var vars struct {
		Memstats *memorySample `json:"memstats"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&vars); err != nil {
		return memorySample{}, fmt.Errorf("usher's /debug/vars: %w", err)
	}
	if vars.Memstats == nil {
		return memorySample{}, fmt.Errorf("usher's /debug/vars has no memstats")
	}
	return *vars.Memstats, nil
}

// since is what was counted from before to m, per call of calls.
func (m memorySample) since(before memorySample, calls int) memoryPerCall {
	n := float64(calls)
	return memoryPerCall{
		allocs: float64(m.Mallocs-before.Mallocs) / n,
		bytes:  float64(m.TotalAlloc-before.TotalAlloc) / n,
		gcs:    float64(m.NumGC-before.NumGC) / n,
	}
}

// get GETs url and returns its response when it is 200 OK; the caller
// closes its body.
func get(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s", resp.Status)
	}
	return resp, nil
}
