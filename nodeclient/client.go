package nodeclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"dsspmesh/modelfile"
	"dsspmesh/node"
)

// StatusTimeout bounds one /status read of [FetchStatus] (a live progress
// poll).
const StatusTimeout = 2 * time.Second

// FetchStatus reads the /status of the node whose HTTP address is addr,
// giving up after StatusTimeout.
func FetchStatus(ctx context.Context, addr string) (node.Status, error) {
	return FetchStatusWithin(ctx, addr, StatusTimeout)
}

// FetchStatusWithin reads a node's /status, giving up after d: a benchmark
// that crowds two cores with dozens of nodes allows more than a live
// progress display does.
func FetchStatusWithin(ctx context.Context, addr string, d time.Duration) (node.Status, error) {
	var s node.Status
	b, err := Get(ctx, "http://"+addr+"/status", d)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("GET http://%s/status: %w", addr, err)
	}
	return s, nil
}

// FetchMetrics reads a node's /metrics (Prometheus text format), giving up
// after d.
func FetchMetrics(ctx context.Context, addr string, d time.Duration) ([]byte, error) {
	return Get(ctx, "http://"+addr+"/metrics", d)
}

// Get reads url's body, giving up after d; a status other than 200 is an
// error naming the url.
func Get(ctx context.Context, url string, d time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, res.Status)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return b, nil
}

// FetchModel downloads GET /model.safetensors from the node whose HTTP
// address is addr: a fresh snapshot read from every shard's leader within
// timeout, or with evaluated the snapshot the node last evaluated. It
// returns the file's bytes, validated by decoding them. ctx bounds the
// whole call; the node's answer to a failed read (503, 404) is the error.
func FetchModel(ctx context.Context, addr string, evaluated bool, timeout time.Duration) ([]byte, *modelfile.File, error) {
	q := url.Values{}
	if evaluated {
		q.Set("evaluated", "")
	} else {
		q.Set("timeout", timeout.String())
	}
	u := "http://" + addr + "/model.safetensors?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, modelfile.MaxFileBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("GET %s: %s: %s", u, res.Status, strings.TrimSpace(string(b)))
	}
	f, err := modelfile.Decode(b)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	return b, f, nil
}
