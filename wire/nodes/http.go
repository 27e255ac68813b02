package nodes

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// MaxHTTPBody caps the response of an HTTP address service.
const MaxHTTPBody = 64 << 10

// HTTP returns a Source that GETs url and reads node addresses from the
// body: host:port entries separated by semicolons (RocketMQ's address
// server format, "10.0.0.1:9876;10.0.0.2:9876"), commas or white space.
// Only a 200 response is accepted, and a body with any malformed entry is
// refused whole, so a broken service cannot shrink the list. A nil client
// means http.DefaultClient; bound it with the ctx given to Nodes.
func HTTP(url string, client *http.Client) Source {
	if client == nil {
		client = http.DefaultClient
	}
	return &httpSource{url: url, client: client}
}

type httpSource struct {
	url    string
	client *http.Client
}

func (s *httpSource) Nodes(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, fmt.Errorf("address service %s: %w", s.url, err)
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("address service: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, MaxHTTPBody))
		return nil, fmt.Errorf("address service %s: %s", s.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxHTTPBody+1))
	if err != nil {
		return nil, fmt.Errorf("address service %s: read: %w", s.url, err)
	}
	if len(body) > MaxHTTPBody {
		return nil, fmt.Errorf("address service %s: response exceeds %d bytes", s.url, MaxHTTPBody)
	}
	out, err := Normalize(ParseList(string(body)))
	if err == nil {
		err = checkCount(out)
	}
	if err != nil {
		return nil, fmt.Errorf("address service %s: %w", s.url, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("address service %s: %w", s.url, ErrNoNodes)
	}
	return out, nil
}

func (s *httpSource) String() string { return "http:" + s.url }

// ParseList splits a list of addresses separated by semicolons, commas or
// white space, as RocketMQ's namesrvAddr setting and address server write
// them. It does not validate the entries; see Normalize.
func ParseList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return r == ';' || r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
	})
}
