package launch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"dsspmesh/modelfile"
)

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
