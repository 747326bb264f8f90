// Command abigen writes the C header of the daemon's ABI (uverbs.ABIHeader): the shared-memory
// layouts and the control messages' structs and codecs, which the C provider includes. `go
// generate ./uverbs` runs it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/xdproce/xdproce/uverbs"
)

func main() {
	out := flag.String("o", "", "the header to write (stdout if empty)")
	flag.Parse()
	h, err := uverbs.ABIHeader()
	if err == nil {
		if *out == "" {
			_, err = os.Stdout.Write(h)
		} else {
			err = os.WriteFile(*out, h, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "abigen:", err)
		os.Exit(1)
	}
}
