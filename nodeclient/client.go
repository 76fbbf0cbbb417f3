package nodeclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"dsspmesh/modelfile"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
	"dsspmesh/node/trust"
)

// Bounds on what a call reads of a reply: a node that answers with an
// endless or oversized body costs the caller at most this much memory.
const (
	// MaxStatusBytes bounds a /status reply: a node of a mesh of hundreds
	// of nodes and thousands of shards answers a few hundred KiB.
	MaxStatusBytes = 8 << 20
	// MaxReplyBytes bounds what [Get] reads: /metrics, and the profiles
	// and goroutine dumps of /debug/pprof.
	MaxReplyBytes = 64 << 20
	// maxErrorBytes bounds the reason read from a reply other than 200.
	maxErrorBytes = 4 << 10
)

// StatusTimeout bounds one /status read of [FetchStatus] (a live progress
// poll).
const StatusTimeout = 2 * time.Second

// FetchStatus reads the /status of the node whose HTTP address is addr,
// giving up after StatusTimeout.
func FetchStatus(ctx context.Context, addr string) (status.Status, error) {
	return FetchStatusWithin(ctx, addr, StatusTimeout)
}

// FetchStatusWithin reads a node's /status, giving up after d: a benchmark
// that crowds two cores with dozens of nodes allows more than a live
// progress display does.
func FetchStatusWithin(ctx context.Context, addr string, d time.Duration) (status.Status, error) {
	var s status.Status
	b, err := get(ctx, "http://"+addr+"/status", d, MaxStatusBytes)
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

// Get reads url's body, giving up after d; a status other than 200, or a
// body longer than MaxReplyBytes, is an error naming the url.
func Get(ctx context.Context, url string, d time.Duration) ([]byte, error) {
	return get(ctx, url, d, MaxReplyBytes)
}

func get(ctx context.Context, url string, d time.Duration, limit int64) ([]byte, error) {
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
	if res.ContentLength > limit {
		return nil, fmt.Errorf("GET %s: a reply of %d bytes, more than %d", url, res.ContentLength, limit)
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("GET %s: a reply longer than %d bytes", url, limit)
	}
	return b, nil
}

// FetchModel downloads GET /model.safetensors from the node whose HTTP
// address is addr: a fresh snapshot read from every shard's leader within
// timeout, or with evaluated the snapshot the node last evaluated. It
// returns the file's bytes, validated by decoding them. It reads the
// file's header first and then only the size the header declares, at most
// modelfile.MaxFileBytes (modelfile.Read). ctx bounds the whole call; the
// node's answer to a failed read (503, 404) is the error.
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
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBytes))
		return nil, nil, &StatusError{URL: u, Code: res.StatusCode, Status: res.Status, Text: strings.TrimSpace(string(b)), RetryAfter: res.Header.Get("Retry-After") != ""}
	}
	if res.ContentLength > modelfile.MaxFileBytes {
		return nil, nil, fmt.Errorf("GET %s: a model of %d bytes, more than %d", u, res.ContentLength, int64(modelfile.MaxFileBytes))
	}
	b, f, err := modelfile.Read(res.Body, modelfile.MaxFileBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if want := res.Header.Get(records.DigestHeader); want != "" {
		if got := Digest(b); got != want {
			return nil, nil, fmt.Errorf("GET %s: the model's bytes have digest %s, the evaluation's claim says %s: refused", u, got, want)
		}
	}
	return b, f, nil
}

// Digest is the hex SHA-256 of a model file's bytes: what an evaluation
// claim's digest names (records.EvalResult.Digest).
func Digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// StatusError is a node's answer other than 200 OK to a model request:
// Code 404 to an evaluated-model request means the evaluator holds none
// right now (none evaluated yet, or the next evaluation is reading the
// model), which a later request may find.
type StatusError struct {
	URL    string
	Code   int
	Status string // "404 Not Found"
	Text   string // the node's reason
	// RetryAfter: the node said when to ask again (a 503 of a node that
	// runs as many model downloads as it allows).
	RetryAfter bool
}

func (e *StatusError) Error() string { return fmt.Sprintf("GET %s: %s: %s", e.URL, e.Status, e.Text) }

// Revoke asks the node whose HTTP address is addr to revoke node id (POST
// /revoke), authenticated by mac (mesh.MeshKey.OperatorMAC(trust.RevokeOp,
// id)). It returns the node's account of it; an error when the node
// refused the request or not every shard applied the revocation (the
// result then says which did not).
func Revoke(ctx context.Context, addr, id string, mac []byte, d time.Duration) (trust.RevokeResult, error) {
	var res trust.RevokeResult
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	u := "http://" + addr + "/revoke?id=" + url.QueryEscape(id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return res, err
	}
	req.Header.Set("Authorization", "DSSP-Operator "+hex.EncodeToString(mac))
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return res, err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(io.LimitReader(r.Body, maxErrorBytes*16))
	if err != nil {
		return res, fmt.Errorf("POST %s: %w", u, err)
	}
	if json.Unmarshal(b, &res) != nil || res.ID == "" {
		return res, fmt.Errorf("POST %s: %s: %s", u, r.Status, strings.TrimSpace(string(b)))
	}
	if r.StatusCode != http.StatusOK {
		return res, fmt.Errorf("POST %s: %s: %s", u, r.Status, strings.Join(res.Errors, "; "))
	}
	return res, nil
}
