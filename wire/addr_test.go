package wire

import "testing"

func TestCheckHostPort(t *testing.T) {
	for addr, ok := range map[string]bool{
		"10.0.0.1:10911": true, "[::1]:10911": true, "broker.example:1": true, "h:65535": true,
		"": false, "h": false, ":10911": false, "[]:1": false, "h:": false, "h:0": false, "h:65536": false,
		"h:99999999999999999999": false, "h:abc": false, "h:-1": false, "h:+1": false, "h:1 ": false, "::1:10911": false,
	} {
		if err := CheckHostPort(addr); (err == nil) != ok {
			t.Errorf("CheckHostPort(%q) = %v, want ok %v", addr, err, ok)
		}
	}
}
