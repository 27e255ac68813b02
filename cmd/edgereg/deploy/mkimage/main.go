// Command mkimage writes edgereg's OCI image as an archive with no container
// daemon; `make image` runs it. See package image.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/edgereg/edgereg/cmd/edgereg/deploy/image"
)

func main() {
	var o image.Options
	out := flag.String("out", "bin/edgereg-image.tar", "archive to write")
	flag.StringVar(&o.Binary, "binary", "", "static edgereg binary (CGO_ENABLED=0)")
	flag.StringVar(&o.Version, "version", "dev", "version label")
	flag.StringVar(&o.Commit, "commit", "unknown", "source revision label")
	flag.StringVar(&o.OS, "os", "linux", "the binary's GOOS")
	flag.StringVar(&o.Arch, "arch", "amd64", "the binary's GOARCH")
	flag.Parse()
	if o.Binary == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: mkimage --binary FILE [--version V --commit C --out FILE]")
		os.Exit(2)
	}
	// SOURCE_DATE_EPOCH (reproducible-builds.org) stamps the image.
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mkimage: SOURCE_DATE_EPOCH:", err)
			os.Exit(2)
		}
		o.Created = time.Unix(sec, 0)
	}
	img, err := image.Build(o)
	if err == nil {
		err = image.WriteArchive(*out, img, o.Version)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
	d, _ := img.Digest()
	fmt.Printf("wrote %s: %s, %s\n", *out, image.RefName(o.Version), d)
}
