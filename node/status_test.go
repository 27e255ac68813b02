package node

import (
	"context"
	"encoding/json"
	"image/png"
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
	base := "http://" + tn.AdminAddr().String()
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
	url := "http://" + tn.AdminAddr().String() + "/"
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
