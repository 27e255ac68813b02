package node

import (
	"context"
	"encoding/json"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/pki"
)

func TestStatusPage(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.AdminAddr = "127.0.0.1:0" })
	ctx := ctxT(t)
	reg := registration("ClusterStatus", "broker-status-a", 0, "10.9.8.7:10911", "status_topic")
	reg.Zone = "zone-east"
	if _, err := tn.dial(pki.RoleBroker).Register(ctx, reg); err != nil {
		t.Fatal(err)
	}
	// A loopback admin address serves the page with the probes.
	if tn.StatusAddr() == nil || tn.StatusAddr().String() != tn.AdminAddr().String() {
		t.Fatalf("status address %v, want the loopback admin address %v", tn.StatusAddr(), tn.AdminAddr())
	}
	base := "http://" + tn.StatusAddr().String()
	code, page := httpGet(t, base+"/")
	if code != 200 {
		t.Fatalf("/ = %d", code)
	}
	for _, want := range []string{"broker-status-a", "10.9.8.7:10911", "zone-east", "status_topic", "live, epoch", `http-equiv="refresh"`} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Error("status page loads scripts or external assets")
	}
	_, body := httpGet(t, base+"/status.json")
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Clusters) != 1 || !st.Clusters[0].Groups[0].Brokers[0].Live || st.TopicCount != 1 {
		t.Fatalf("status.json = %+v", st)
	}
	if code, _ := httpGet(t, base+"/nope"); code != 404 {
		t.Errorf("/nope = %d", code)
	}
}

// TestStatusPageEscapesPeerNames: names a broker chooses (cluster, group,
// zone, address) are markup-free on the page and in /status.json, which
// escapes < > & too, so neither runs in the operator's browser.
func TestStatusPageEscapesPeerNames(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.AdminAddr = "127.0.0.1:0" })
	reg := registration(`"><script>alert(1)</script>`, `</title><img src=x onerror=alert(2)>`, 0,
		`<svg onload=alert(3)>:10911`, "status_topic")
	reg.Zone = `</style><a href="javascript:alert(4)">z</a>`
	if _, err := tn.dial(pki.RoleBroker).Register(ctxT(t), reg); err != nil {
		t.Fatal(err)
	}
	base := "http://" + tn.StatusAddr().String()
	_, page := httpGet(t, base+"/")
	_, body := httpGet(t, base+"/status.json")
	for what, text := range map[string]string{"page": page, "status.json": body} {
		for _, markup := range []string{"<script", "<img", "<svg", `<a href="javascript`, "</style><a", "</title><img"} {
			if strings.Contains(text, markup) {
				t.Errorf("%s carries a peer's %q unescaped", what, markup)
			}
		}
	}
	if !strings.Contains(page, "&lt;svg onload=alert(3)&gt;:10911") {
		t.Errorf("the page does not show the address escaped:\n%s", page)
	}
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Clusters[0].Groups[0].Zone != reg.Zone {
		t.Errorf("status.json does not carry the zone as registered: %v %+v", err, st.Clusters)
	}
}

// TestStatusPageInChromium renders the page in headless Chromium and checks
// that the screenshot shows the registered broker's live-lease badge.
func TestStatusPageInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed: .ci/run installs Debian's chromium package")
		}
		t.Skip("chromium not installed (apt-get install chromium); CI installs it")
	}
	tn := startNode(t, func(c *Config) { c.AdminAddr = "127.0.0.1:0" })
	if _, err := tn.dial(pki.RoleBroker).Register(ctxT(t), registration("c1", "broker-in-chromium", 0, "10.1.2.3:10911", "t")); err != nil {
		t.Fatal(err)
	}
	url := "http://" + tn.StatusAddr().String() + "/"
	dir := t.TempDir()
	shot := filepath.Join(dir, "status.png")
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1280,800"}
	cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dom, err := exec.CommandContext(cctx, chromium, append(args, "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	if !strings.Contains(string(dom), "broker-in-chromium") || !strings.Contains(string(dom), "10.1.2.3:10911") {
		t.Fatalf("rendered DOM lacks the broker:\n%s", dom)
	}
	if out, err := exec.CommandContext(cctx, chromium, append(args, "--screenshot="+shot, url)...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	if n := countPixels(t, shot, 0x2e, 0x7d, 0x32); n < 200 {
		t.Fatalf("screenshot shows %d pixels of the live-lease badge, want a visible badge", n)
	}
	if keep := os.Getenv("EDGEREG_KEEP_SCREENSHOT"); keep != "" {
		b, _ := os.ReadFile(shot)
		os.WriteFile(keep, b, 0o644)
	}
}

// countPixels counts pixels within a small distance of the colour.
func countPixels(t *testing.T, path string, r, g, b uint8) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	near := func(a uint32, b uint8) bool { d := int(a>>8) - int(b); return d > -12 && d < 12 }
	n := 0
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			if near(pr, r) && near(pg, g) && near(pb, b) {
				n++
			}
		}
	}
	return n
}

// TestStatusOnItsOwnAddress: with a status address of its own, the admin
// address serves only the probes and metrics, and the status address only
// the page and /status.json.
func TestStatusOnItsOwnAddress(t *testing.T) {
	tn := startNode(t, func(c *Config) {
		c.AdminAddr = "127.0.0.1:0"
		c.StatusAddr = "127.0.0.1:0"
	})
	if tn.StatusAddr() == nil || tn.StatusAddr().String() == tn.AdminAddr().String() {
		t.Fatalf("status address %v, want one of its own (admin %v)", tn.StatusAddr(), tn.AdminAddr())
	}
	admin, status := "http://"+tn.AdminAddr().String(), "http://"+tn.StatusAddr().String()
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/": 404, "/status.json": 404} {
		if code, _ := httpGet(t, admin+path); code != want {
			t.Errorf("admin %s = %d, want %d", path, code, want)
		}
	}
	for path, want := range map[string]int{"/": 200, "/status.json": 200, "/metrics": 404, "/healthz": 404} {
		if code, _ := httpGet(t, status+path); code != want {
			t.Errorf("status %s = %d, want %d", path, code, want)
		}
	}
	for _, srv := range tn.admin.servers {
		if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 {
			t.Errorf("server %s lacks a timeout: header %s read %s write %s idle %s", srv.Addr,
				srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
		}
	}
}

// TestStatusPlacement: the page goes where the configuration says, and by
// default never onto a non-loopback admin address (the shipped manifest
// binds the admin address to all interfaces for probes and Prometheus).
func TestStatusPlacement(t *testing.T) {
	cases := []struct{ admin, status, want string }{
		{"127.0.0.1:9877", "", "127.0.0.1:9877"},
		{"localhost:9877", "", "localhost:9877"},
		{"[::1]:9877", "", "[::1]:9877"},
		{"0.0.0.0:9877", "", AdminOff},
		{"[::]:9877", "", AdminOff},
		{":9877", "", AdminOff},
		{"10.1.2.3:9877", "", AdminOff},
		{"0.0.0.0:9877", "127.0.0.1:9878", "127.0.0.1:9878"},
		{"127.0.0.1:9877", AdminOff, AdminOff},
		{AdminOff, "", AdminOff},
		{AdminOff, "127.0.0.1:9878", "127.0.0.1:9878"},
	}
	for _, tc := range cases {
		if got := statusAddr(Config{AdminAddr: tc.admin, StatusAddr: tc.status}); got != tc.want {
			t.Errorf("admin %q, status %q: page on %q, want %q", tc.admin, tc.status, got, tc.want)
		}
	}
}

// TestStatusRefusesForeignHostNames: a page on loopback is still reachable
// from a browser on the same machine through DNS rebinding (a hostile site
// whose name resolves to 127.0.0.1), which would read the whole topology.
// On a loopback address the page and /status.json answer only requests
// addressed to an IP literal or localhost; the probes are not affected.
func TestStatusRefusesForeignHostNames(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.AdminAddr = "127.0.0.1:0" })
	base := "http://" + tn.StatusAddr().String()
	_, port, _ := net.SplitHostPort(tn.StatusAddr().String())
	get := func(path, host string) int {
		req, err := http.NewRequest("GET", base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/", "/status.json"} {
		if code := get(path, "rebind.example:"+port); code != http.StatusForbidden {
			t.Errorf("%s with Host rebind.example: %d, want 403", path, code)
		}
		for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port} {
			if code := get(path, host); code != http.StatusOK {
				t.Errorf("%s with Host %s: %d, want 200", path, host, code)
			}
		}
	}
	if code := get("/healthz", "rebind.example:"+port); code != http.StatusOK {
		t.Errorf("/healthz with a foreign Host: %d, want 200 (probes are not affected)", code)
	}
}
